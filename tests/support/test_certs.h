// Certificates for TLS tests, made in memory with OpenSSL (EC P-256 keys,
// valid from an hour ago for a week) and written as PEM files, so no test
// depends on the openssl command or on files that expire.
#pragma once

#include <string>

#include "kvtier/status.h"

namespace kvtier::testing {

struct TestCertFiles {
  std::string cert_file;
  std::string key_file;
};

struct TestPki {
  std::string ca_file;        // the CA that signed `server` and `client`
  std::string other_ca_file;  // a CA that signed nothing here
  TestCertFiles server;       // names 127.0.0.1, ::1 and redis.test; also a client cert
  TestCertFiles client;       // a client certificate, for mutual TLS
  // The server's key again, encrypted with a passphrase.
  std::string encrypted_key_file;
};

// Makes the files in `dir`, which must exist.
Result<TestPki> MakeTestPki(const std::string& dir);

}  // namespace kvtier::testing
