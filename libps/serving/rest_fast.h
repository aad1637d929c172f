// The predict body of a "libsvm" model read by simdjson straight into a batch, without a
// JSON document tree or any copy of the values: RestApi::Handle's fast path. It takes
// only bodies that the general path (ParseRequestJson, then the instances into
// InputSchema::ToBatch) accepts, and gives the batch that path gives: a JSON object with
// "instances", a non-empty list of objects with "features" (integers) and optional
// "values" (numbers or null), or of bare lists of features; an optional
// "signature_name" of "serving_default" or ""; other keys ignored as that path ignores
// them. Anything else (a syntax error, the literals NaN or Infinity, a repeated key,
// "inputs", nested lists, an id out of range, ...) is left to the general path, whose
// errors are TF Serving's.
#pragma once

#include <string_view>

#include "libps/model/batch.h"
#include "libps/serving/rest_inputs.h"

namespace ps::serving {

// The body's batch, or null when the general path must read it. The batch lives in the
// calling thread's scratch space (reused, so a request allocates nothing once the thread
// has seen one as large): valid until the thread's next call.
const model::Batch* FastPredictBatch(std::string_view body, const InputSchema& schema);

}  // namespace ps::serving
