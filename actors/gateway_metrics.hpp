#pragma once
// The gateway's GET /metrics: the engine's and the gateway's counters and latency histograms
// in Prometheus' text format (docs/http-api.md).

#include <string>

#include "actors/gateway_server.hpp"
#include "weft/engine.hpp"

namespace weft::gateway {

std::string prometheus_text(const EngineMetrics& m, const GatewayState& state);

}  // namespace weft::gateway
