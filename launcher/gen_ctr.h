// `pstrain gen-ctr`: a synthetic click data set with a known ground truth
// (libps/data/ctr_gen.h does the work).
#pragma once

#include "launcher/cli.h"

namespace ps::launcher {

// Writes the data set and prints where it went, num_features, field_offsets and the
// ground truth's eval AUC and logloss. 2 for a bad spec file or values, 1 when writing fails.
int RunGenCtr(const GenCtrCommand& command);

}  // namespace ps::launcher
