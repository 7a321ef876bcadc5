#pragma once
// WEFT_TRY_ASSIGN(target, expr): `expr` is a Result<T>; its error is returned from the
// enclosing function, else its value is moved into `target` (declared before). For the
// loaders that bind many tensors in a row (model_weights.cpp, encoder_model.cpp,
// seq2seq_weights.cpp).

#include <utility>

// `target` may be a member access (a.b), which parentheses would not change.
// NOLINTNEXTLINE(bugprone-macro-parentheses)
#define WEFT_TRY_ASSIGN(target, expr)     \
  do {                                    \
    auto weft_r = (expr);                 \
    if (!weft_r) return weft_r.error();   \
    (target) = std::move(weft_r.value()); \
  } while (0)
