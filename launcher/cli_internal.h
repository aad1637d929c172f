// Internal to launcher/cli*.cc: the option helpers the command parsers share, and the
// parsers of the model-dir commands (cli_model_dir.cc) that ParseLauncherArgs dispatches to.
#pragma once

#include <string>
#include <vector>

#include <boost/program_options/options_description.hpp>
#include <boost/program_options/variables_map.hpp>

#include "launcher/cli.h"
#include "libps/core/status.h"

namespace ps::launcher::internal {

// "usage: <synopsis>", a blank line, `about`, a blank line, the options.
std::string Usage(const std::string& synopsis, const std::string& about,
                  const boost::program_options::options_description& options);
// Parses `args` against `desc` into `vm`; stray words are errors. InvalidArgument
// "pstrain <sub>: ..." on a bad option.
Status ParseOptions(const std::string& sub, const std::vector<std::string>& args,
                    const boost::program_options::options_description& desc,
                    boost::program_options::variables_map* vm);
// True when --help or -h comes before any "--".
bool WantsHelp(const std::vector<std::string>& args);

// `args`: what follows the command's name.
Result<Command> ParseReport(const std::vector<std::string>& args);
Result<Command> ParseInspect(const std::vector<std::string>& args);
Result<Command> ParseGenCtr(const std::vector<std::string>& args);
Result<Command> ParseExport(const std::vector<std::string>& args);
Result<Command> ParsePredict(const std::vector<std::string>& args);

}  // namespace ps::launcher::internal
