// pstrain: the operator CLI. Everything is in libps/train/launch.h.
#include <string>
#include <vector>

#include "launcher/launch.h"

int main(int argc, char** argv) {
  return ps::launcher::RunLauncher(std::vector<std::string>(argv + 1, argv + argc));
}
