// Talking to a running chief as an operator tool: the client call behind `pstrain stop`,
// `pstrain status` and the stop request of `pstrain local`, and those two commands.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "launcher/cli.h"
#include "libps/cluster/tf_config.h"
#include "libps/core/status.h"
#include "libps/net/tls.h"
#include "libps/proto/messages.h"

namespace ps::launcher {

// Connects as an operator tool (Role::kClient, cluster id 0), sends one request and
// returns the reply body. `secret`: the cluster secret, when one is configured.
// `timeout` bounds the connect, the handshake and the call each.
// Errors name the address: "cannot reach the chief at 127.0.0.1:2222: ...".
// Blocking; safe from any thread (each call has its own runtime and connection).
Result<proto::Body> CallChief(const cluster::HostPort& chief,
                              const std::optional<std::string>& secret,
                              std::chrono::milliseconds timeout, proto::Body request,
                              std::shared_ptr<net::TlsContext> tls = nullptr);

// The cluster secret from --secret-file; nullopt when no file is given. Errors
// (InvalidArgument) start with "--secret-file: ".
Result<std::optional<std::string>> LoadSecret(const std::optional<std::string>& file);

// Send Stop / GetStatus and print the outcome (status: FormatStatus, or the raw JSON
// with --json). Exit 0 on the expected reply; 1 when the chief cannot be reached or
// answers otherwise (status: or its JSON cannot be formatted); 2 for an unreadable
// secret file.
int RunStop(const StopCommand& command);
int RunStatus(const StatusCommand& command);

}  // namespace ps::launcher
