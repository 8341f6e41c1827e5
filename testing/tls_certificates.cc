#include "testing/tls_certificates.h"

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "testing/redis_cluster.h"  // RunProgram

namespace sluice::testing {
namespace {

[[noreturn]] void Fatal(const std::string& what) {
  std::fprintf(stderr, "TLS test fixture: %s\n", what.c_str());
  std::abort();
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) Fatal("cannot write " + path);
}

// Runs openssl with `args` in `dir`'s files; aborts with its log when it fails.
void OpenSsl(const std::string& dir, std::vector<std::string> args) {
  args.insert(args.begin(), "openssl");
  const std::string log = dir + "/openssl.log";
  if (RunProgram(args, log, 30000) != 0) {
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    Fatal("openssl " + args[1] + " failed (is openssl installed? run scripts/setup.sh):\n" +
          text.str());
  }
}

// A self-signed CA certificate and its key.
void MakeCa(const std::string& dir, const std::string& name, const std::string& cn) {
  const std::string config = dir + "/" + name + ".cnf";
  Write(config, "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = " + cn +
                    "\n[ca]\nbasicConstraints = critical,CA:TRUE\n"
                    "keyUsage = critical,keyCertSign,cRLSign\nsubjectKeyIdentifier = hash\n");
  OpenSsl(dir, {"req", "-x509", "-config", config, "-extensions", "ca", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", dir + "/" + name + ".key",
                "-out", dir + "/" + name + ".crt", "-days", "2"});
}

// A certificate for `cn` with `extensions`, signed by the CA "ca".
void MakeLeaf(const std::string& dir, const std::string& name, const std::string& cn,
              const std::string& extensions) {
  const std::string config = dir + "/" + name + ".cnf";
  Write(config, "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = " + cn + "\n");
  const std::string ext = dir + "/" + name + ".ext";
  Write(ext, "basicConstraints = CA:FALSE\nauthorityKeyIdentifier = keyid\n" + extensions);
  OpenSsl(dir, {"req", "-new", "-config", config, "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", dir + "/" + name + ".key",
                "-out", dir + "/" + name + ".csr"});
  OpenSsl(dir, {"x509", "-req", "-in", dir + "/" + name + ".csr", "-CA", dir + "/ca.crt", "-CAkey",
                dir + "/ca.key", "-CAcreateserial", "-out", dir + "/" + name + ".crt", "-days", "2",
                "-extfile", ext});
}

}  // namespace

TlsCertificates::TlsCertificates() {
  char tmpl[] = "/tmp/sluice-tls-XXXXXX";
  if (!::mkdtemp(tmpl)) Fatal("mkdtemp failed");
  dir_ = tmpl;
  MakeCa(dir_, "ca", "sluice test CA");
  MakeCa(dir_, "other-ca", "sluice test CA that signed nothing");
  MakeLeaf(dir_, "server", "localhost",
           "keyUsage = critical,digitalSignature\nextendedKeyUsage = serverAuth,clientAuth\n"
           "subjectAltName = DNS:localhost,IP:127.0.0.1\n");
  MakeLeaf(dir_, "client", "sluice test client",
           "keyUsage = critical,digitalSignature\nextendedKeyUsage = clientAuth\n");
}

TlsCertificates::~TlsCertificates() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

}  // namespace sluice::testing
