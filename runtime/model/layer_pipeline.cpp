#include "runtime/model/layer_pipeline.hpp"

#include <algorithm>
#include <string>

namespace weft::model {

CpuStage::CpuStage(const Model& model, LayerRange layers, KvLayout layout, int num_pages,
                   unsigned threads)
    : model_(model),
      layers_(layers),
      kv_(stage_layout(layout, layers), num_pages),
      pool_(threads) {}

Result<void> CpuStage::forward(const StepBatch& batch, std::span<const float> hidden_in,
                               std::vector<float>& out, parallel::Communicator* tensor_parallel) {
  return model_.forward_layers(batch, kv_, layers_, hidden_in, out, pool_, cpu::KernelPath::kAuto,
                               tensor_parallel);
}

std::vector<StepBatch> split_micro_batches(const StepBatch& batch, int count) {
  const auto S = static_cast<int>(batch.sequences.size());
  count = std::clamp(count, 1, std::max(S, 1));
  if (count == 1) return {batch};
  const auto total = static_cast<long long>(batch.tokens.size());
  std::vector<StepBatch> out;
  int s = 0;
  long long done = 0;
  for (int part = 0; part < count && s < S; ++part) {
    // Take sequences until this part reaches its share of the tokens, leaving at least one
    // sequence for each part still to come.
    const long long target = total * (part + 1) / count;
    StepBatch mb;
    const int last_allowed = S - (count - part - 1);
    do {
      SequenceSlice seq = batch.sequences[static_cast<std::size_t>(s)];
      const auto begin = static_cast<std::ptrdiff_t>(seq.token_begin);
      mb.tokens.insert(mb.tokens.end(), batch.tokens.begin() + begin,
                       batch.tokens.begin() + begin + seq.token_count);
      mb.positions.insert(mb.positions.end(), batch.positions.begin() + begin,
                          batch.positions.begin() + begin + seq.token_count);
      seq.token_begin = static_cast<int>(mb.tokens.size()) - seq.token_count;
      done += seq.token_count;
      mb.sequences.push_back(std::move(seq));
      ++s;
    } while (s < last_allowed && (done < target || part + 1 == count));
    out.push_back(std::move(mb));
  }
  return out;
}

Result<void> check_stage_ranges(const std::vector<LayerRange>& ranges, int num_layers) {
  int next = 0;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    if (ranges[i].begin != next || ranges[i].count < 1) {
      return Error(ErrorCode::kInvalidArgument,
                   "pipeline stage " + std::to_string(i) + " holds layers [" +
                       std::to_string(ranges[i].begin) + ", " +
                       std::to_string(ranges[i].begin + ranges[i].count) +
                       "), but the next layer to run is " + std::to_string(next));
    }
    next += ranges[i].count;
  }
  if (next != num_layers) {
    return Error(ErrorCode::kInvalidArgument, "pipeline stages hold layers [0, " +
                                                  std::to_string(next) + ") of " +
                                                  std::to_string(num_layers));
  }
  return {};
}

Result<std::unique_ptr<LayerPipeline>> LayerPipeline::create(
    std::vector<std::unique_ptr<StageForward>> stages) {
  if (stages.empty()) return Error(ErrorCode::kInvalidArgument, "a pipeline needs a stage");
  std::vector<LayerRange> ranges;
  for (const auto& s : stages) {
    ranges.push_back(s->layers());
    if (s->num_pages() != stages.front()->num_pages()) {
      return Error(ErrorCode::kInvalidArgument,
                   "pipeline stages' KV pools differ: " + std::to_string(s->num_pages()) +
                       " pages against " + std::to_string(stages.front()->num_pages()));
    }
  }
  if (auto ok = check_stage_ranges(ranges, stages.front()->spec().num_layers); !ok) {
    return ok.error();
  }
  return std::unique_ptr<LayerPipeline>(new LayerPipeline(std::move(stages)));
}

Result<void> LayerPipeline::forward(const StepBatch& batch, std::vector<float>& logits) {
  std::span<const float> in;
  for (std::size_t i = 0; i < stages_.size(); ++i) {
    const bool last = i + 1 == stages_.size();
    std::vector<float>& out = last ? logits : hidden_;
    if (auto ok = stages_[i]->forward(batch, in, out); !ok) return ok;
    if (!last) {
      // The next stage reads this one's output while writing its own.
      std::swap(hidden_, staged_);
      in = staged_;
    }
  }
  return {};
}

}  // namespace weft::model
