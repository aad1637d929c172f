// `pstrain local`: runs every task of a cluster file on this machine and supervises them.
//
// Starts the tasks of PlanLocal (local_plan.h) in order, prints every line they write
// prefixed with their label (one writer, lines never interleave), restarts tasks as
// DecideRestart says, and handles SIGINT/SIGTERM/SIGHUP read from a signalfd: the first
// asks the chief to stop (Stop over the control connection; SIGTERM to the chief if that
// fails), the second sends SIGTERM to every task, the third SIGKILL. Once the chief has
// exited, the others get --shutdown-grace to exit (none when the chief exited 2), then
// SIGTERM and, 10 s later, SIGKILL. (Signals that land on a thread that does not block
// them are forwarded to the loop's thread by handlers: RunLocal below.) The loop waits in poll(2) on the signalfd and one
// pidfd per child (polling the children every 100 ms where pidfd_open is missing).
#pragma once

#include "launcher/cli.h"

namespace ps::launcher {

// The chief's exit decides the run's, as Kubeflow's default success policy does: exit 0
// when the chief exited 0 (its last run, after restarts), even if other tasks failed along
// the way (a worker killed and recovered from, a task that exited non-zero after a stop):
// the summary reports them, they are not counted. Exit 1 when the chief failed (the
// summary names every task that failed), 2 for a configuration error found before
// starting anything (cluster file, job file, secret file, a daemon executable not found, a
// cluster PlanLocal refuses).
// Blocks SIGINT/SIGTERM/SIGHUP in the calling thread (and so in every thread it starts)
// and reads them from a signalfd in its loop. Threads that existed before (OpenBLAS's
// pool, started in a library constructor) do not block them: handlers installed for the
// run forward a signal landing on such a thread to the calling thread, where it waits for
// the signalfd. The old mask and handlers are restored on return. Call it from the main
// thread before any thread of pstrain's own exists.
int RunLocal(const LocalCommand& command);

}  // namespace ps::launcher
