// pstrain: the operator CLI. The commands are in launcher/cli.h.
#include <string>
#include <vector>

#include "launcher/cli.h"

int main(int argc, char** argv) {
  return ps::launcher::RunLauncher(std::vector<std::string>(argv + 1, argv + argc));
}
