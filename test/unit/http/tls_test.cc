// HTTPS over 127.0.0.1 with certificates from scripts/make-certs.sh (a CA with "server"
// and "client", a foreign CA with "intruder"): without client certificates, with required
// ones, with optional ones; through the module's client and through curl, which also
// exercises Expect: 100-continue on its own (it sends it for bodies over 1 MB).
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "libps/http/client.h"
#include "libps/http/server.h"
#include "test/unit/http/http_test_util.h"

using namespace ps;
using namespace ps::http;
using namespace ps::httptest;

namespace {

// A temporary directory with ca.pem, server.*, client.*, and other/ with a foreign CA and
// its intruder.*. Removed on destruction.
struct Certs {
  std::string dir;
  Certs() {
    char tmpl[] = "/tmp/pstrain-https-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    const char* src = std::getenv("PSTRAIN_SOURCE_DIR");
    REQUIRE(src != nullptr);  // set by meson test
    const std::string script = std::string(src) + "/scripts/make-certs.sh";
    REQUIRE(std::system(("bash " + script + " " + dir + " server client >/dev/null").c_str()) == 0);
    REQUIRE(std::system(("bash " + script + " " + dir + "/other intruder >/dev/null").c_str()) ==
            0);
  }
  ~Certs() { std::filesystem::remove_all(dir); }
  std::string Pem(const std::string& name) const { return dir + "/" + name + ".pem"; }
  std::string Key(const std::string& name) const { return dir + "/" + name + ".key"; }
  TlsOptions Server(bool with_ca, bool require = true) const {
    TlsOptions t;
    t.cert_file = Pem("server");
    t.key_file = Key("server");
    if (with_ca) t.ca_file = Pem("ca");
    t.require_client_cert = require;
    return t;
  }
  ClientTls Client(const std::string& name) const {
    ClientTls c;
    c.ca_file = Pem("ca");
    if (name == "intruder") {
      c.cert_file = dir + "/other/intruder.pem";
      c.key_file = dir + "/other/intruder.key";
    } else if (!name.empty()) {
      c.cert_file = Pem(name);
      c.key_file = Key(name);
    }
    return c;
  }
};

// Says whether the request came over TLS and whose certificate it carried.
Response WhoAmI(const Request& r) {
  return Response::Text(200, std::string(r.tls ? "tls" : "plain") + " [" + r.client_subject + "] " +
                                 std::to_string(r.body.size()));
}

std::unique_ptr<Server> StartTls(const TlsOptions& tls, uint64_t body_limit = 4 << 20) {
  ServerOptions o;
  o.tls = tls;
  o.body_limit = body_limit;
  auto s = Server::Start(o, WhoAmI);
  REQUIRE(s.ok());
  return std::move(*s);
}

Result<ClientResponse> GetTls(uint16_t port, const ClientTls& tls) {
  ClientRequest req;
  req.target = "/who";
  return Fetch("127.0.0.1", port, req, 10s, &tls);
}

// Runs a shell command; its exit status and stdout.
std::pair<int, std::string> Run(const std::string& command) {
  FILE* p = ::popen(command.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  std::array<char, 4096> buf;
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace

TEST_CASE("HTTPS without client certificates; a plain-HTTP client is refused, others unharmed") {
  Certs certs;
  auto server = StartTls(certs.Server(/*with_ca=*/false));
  auto r = GetTls(server->port(), certs.Client(""));
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  CHECK(r->body == "tls [] 0");

  auto plain = http::Get("127.0.0.1", server->port(), "/who", 5s);
  CHECK_FALSE(plain.ok());
  CHECK(WaitUntil([&] { return server->stats().tls_failures == 1; }));
  // A client that does not trust the server's CA refuses it.
  ClientTls foreign;
  foreign.ca_file = certs.dir + "/other/ca.pem";
  CHECK_FALSE(GetTls(server->port(), foreign).ok());

  auto again = GetTls(server->port(), certs.Client(""));
  REQUIRE(again.ok());
  CHECK(again->status == 200);
}

TEST_CASE("HTTPS with required client certificates: only the CA's clients get in") {
  Certs certs;
  auto server = StartTls(certs.Server(/*with_ca=*/true));
  auto ok = GetTls(server->port(), certs.Client("client"));
  REQUIRE(ok.ok());
  CHECK(ok->body == "tls [/CN=client] 0");
  CHECK_FALSE(GetTls(server->port(), certs.Client("")).ok());
  CHECK_FALSE(GetTls(server->port(), certs.Client("intruder")).ok());
  CHECK(WaitUntil([&] { return server->stats().tls_failures == 2; }));
  CHECK(server->stats().responses == 1);
}

TEST_CASE("HTTPS with optional client certificates: none is fine, a foreign one is not") {
  Certs certs;
  auto server = StartTls(certs.Server(/*with_ca=*/true, /*require=*/false));
  auto none = GetTls(server->port(), certs.Client(""));
  REQUIRE(none.ok());
  CHECK(none->body == "tls [] 0");
  auto with = GetTls(server->port(), certs.Client("client"));
  REQUIRE(with.ok());
  CHECK(with->body == "tls [/CN=client] 0");
  CHECK_FALSE(GetTls(server->port(), certs.Client("intruder")).ok());
}

TEST_CASE("TLS files that cannot be loaded are named") {
  Certs certs;
  ServerOptions o;
  o.name = "serving";
  o.tls = certs.Server(true);
  o.tls->cert_file = certs.dir + "/missing.pem";
  auto missing = Server::Start(o, WhoAmI);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == Code::kInvalidArgument);
  CHECK(missing.status().message().find("serving 127.0.0.1:0: TLS certificate " + certs.dir +
                                        "/missing.pem") != std::string::npos);
  o.tls = certs.Server(true);
  o.tls->key_file = certs.Key("client");  // not the certificate's key
  auto mismatch = Server::Start(o, WhoAmI);
  REQUIRE_FALSE(mismatch.ok());
  CHECK(mismatch.status().message().find("TLS key " + certs.Key("client")) != std::string::npos);
}

TEST_CASE("curl: HTTPS with a client certificate, and Expect: 100-continue for a big body") {
  REQUIRE(Run("command -v curl").first == 0);  // scripts/setup.sh's TEST_PACKAGES has curl
  Certs certs;
  auto server = StartTls(certs.Server(/*with_ca=*/true), /*body_limit=*/3 << 20);
  const std::string port = std::to_string(server->port());
  // The certificate names "server": curl checks the name, so it is resolved to 127.0.0.1.
  const std::string curl = "curl -sS --max-time 20 --resolve server:" + port +
                           ":127.0.0.1 --cacert " + certs.Pem("ca") + " --cert " +
                           certs.Pem("client") + " --key " + certs.Key("client") + " ";
  const std::string url = "https://server:" + port + "/who";
  auto [rc, out] = Run(curl + url);
  CHECK(rc == 0);
  CHECK(out == "tls [/CN=client] 0");

  const std::string body2 = certs.dir + "/2mb", body4 = certs.dir + "/4mb";
  std::ofstream(body2) << std::string(2 << 20, 'a');
  std::ofstream(body4) << std::string(4 << 20, 'b');
  // -v shows curl's side of the exchange on stderr: the Expect it sent, the 100 it got.
  auto [rc2, out2] = Run(curl + "-v --data-binary @" + body2 + " " + url + " 2>&1");
  CHECK(rc2 == 0);
  CHECK(out2.find("> Expect: 100-continue") != std::string::npos);
  CHECK(out2.find("< HTTP/1.1 100 Continue") != std::string::npos);
  CHECK(out2.find("tls [/CN=client] " + std::to_string(2 << 20)) != std::string::npos);

  auto [rc4, out4] =
      Run(curl + "-v -o /dev/null -w '%{http_code}' --data-binary @" + body4 + " " + url + " 2>&1");
  CHECK(rc4 == 0);
  CHECK(out4.find("> Expect: 100-continue") != std::string::npos);
  CHECK(out4.find("< HTTP/1.1 100 Continue") == std::string::npos);  // refused before the body
  CHECK(out4.find("< HTTP/1.1 413 Payload Too Large") != std::string::npos);
  CHECK(out4.substr(out4.size() - 3) == "413");
}
