#include "tests/support/test_certs.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <memory>
#include <utility>
#include <vector>

namespace kvtier::testing {
namespace {

struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertDeleter {
  void operator()(X509* c) const { X509_free(c); }
};
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyDeleter>;
using CertPtr = std::unique_ptr<X509, CertDeleter>;

Status Failed(const std::string& what) {
  char buf[256] = "unknown error";
  if (unsigned long e = ERR_get_error()) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return Status::Internal("test certificates: " + what + ": " + buf);
}

// One X.509 v3 extension, in openssl.cnf syntax ("critical,CA:TRUE").
bool AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

struct Signed {
  KeyPtr key;
  CertPtr cert;
};

// A certificate for a fresh key, named `cn`; self-signed when `issuer` is
// null. `extensions` are {nid, value} pairs.
Result<Signed> Issue(const std::string& cn, long serial, const Signed* issuer,
                     const std::vector<std::pair<int, const char*>>& extensions) {
  Signed out;
  out.key.reset(EVP_EC_gen("P-256"));
  out.cert.reset(X509_new());
  if (!out.key || !out.cert) return Failed("new key for " + cn);
  X509* cert = out.cert.get();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 7L * 86400);
  X509_set_pubkey(cert, out.key.get());
  X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509* issuer_cert = issuer != nullptr ? issuer->cert.get() : cert;
  X509_set_issuer_name(cert, X509_get_subject_name(issuer_cert));
  for (const auto& [nid, value] : extensions) {
    if (!AddExtension(cert, issuer_cert, nid, value))
      return Failed(std::string("extension ") + value);
  }
  EVP_PKEY* signer = issuer != nullptr ? issuer->key.get() : out.key.get();
  if (X509_sign(cert, signer, EVP_sha256()) == 0) return Failed("sign " + cn);
  return out;
}

Result<Signed> IssueCa(const std::string& cn, long serial) {
  return Issue(cn, serial, nullptr,
               {{NID_basic_constraints, "critical,CA:TRUE"},
                {NID_key_usage, "critical,keyCertSign,cRLSign"},
                {NID_subject_key_identifier, "hash"}});
}

template <typename WriteFn>
Status WritePem(const std::string& path, WriteFn write) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return Status::Internal("test certificates: cannot write " + path);
  const bool ok = write(f);
  std::fclose(f);
  return ok ? Status::Ok() : Failed("write " + path);
}

Status WriteCert(const std::string& path, const Signed& s) {
  return WritePem(path, [&](std::FILE* f) { return PEM_write_X509(f, s.cert.get()) == 1; });
}

Status WriteKey(const std::string& path, const Signed& s, const char* passphrase = nullptr) {
  return WritePem(path, [&](std::FILE* f) {
    if (passphrase == nullptr) {
      return PEM_write_PrivateKey(f, s.key.get(), nullptr, nullptr, 0, nullptr, nullptr) == 1;
    }
    return PEM_write_PrivateKey(f, s.key.get(), EVP_aes_128_cbc(),
                                reinterpret_cast<const unsigned char*>(passphrase),
                                static_cast<int>(std::char_traits<char>::length(passphrase)),
                                nullptr, nullptr) == 1;
  });
}

}  // namespace

Result<TestPki> MakeTestPki(const std::string& dir) {
  auto ca = IssueCa("kvtier test CA", 1);
  if (!ca.ok()) return ca.status();
  auto other_ca = IssueCa("kvtier other CA", 2);
  if (!other_ca.ok()) return other_ca.status();
  auto server = Issue("redis.test", 3, &*ca,
                      {{NID_basic_constraints, "critical,CA:FALSE"},
                       // clientAuth too: cluster nodes present it on their TLS bus.
                       {NID_ext_key_usage, "serverAuth,clientAuth"},
                       {NID_subject_alt_name, "DNS:redis.test,IP:127.0.0.1,IP:::1"},
                       {NID_authority_key_identifier, "keyid"}});
  if (!server.ok()) return server.status();
  auto client = Issue("kvtier test client", 4, &*ca,
                      {{NID_basic_constraints, "critical,CA:FALSE"},
                       {NID_ext_key_usage, "clientAuth"},
                       {NID_authority_key_identifier, "keyid"}});
  if (!client.ok()) return client.status();

  TestPki pki;
  pki.ca_file = dir + "/ca.pem";
  pki.other_ca_file = dir + "/other-ca.pem";
  pki.server = {dir + "/server.pem", dir + "/server.key"};
  pki.client = {dir + "/client.pem", dir + "/client.key"};
  pki.encrypted_key_file = dir + "/server-encrypted.key";
  KVTIER_RETURN_IF_ERROR(WriteCert(pki.ca_file, *ca));
  KVTIER_RETURN_IF_ERROR(WriteCert(pki.other_ca_file, *other_ca));
  KVTIER_RETURN_IF_ERROR(WriteCert(pki.server.cert_file, *server));
  KVTIER_RETURN_IF_ERROR(WriteKey(pki.server.key_file, *server));
  KVTIER_RETURN_IF_ERROR(WriteCert(pki.client.cert_file, *client));
  KVTIER_RETURN_IF_ERROR(WriteKey(pki.client.key_file, *client));
  KVTIER_RETURN_IF_ERROR(WriteKey(pki.encrypted_key_file, *server, "secret"));
  return pki;
}

}  // namespace kvtier::testing
