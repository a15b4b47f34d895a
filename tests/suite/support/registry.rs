//! A real OCI registry for the tests: Debian's `docker-registry` (the CNCF distribution
//! registry, 2.8; `.ci/run` installs it), started on a free loopback port with a config of the
//! tests' own and a fresh storage folder, and stopped when dropped. [`TestRegistry::secured`]
//! adds htpasswd basic auth (a bcrypt file made by `htpasswd`, from apache2-utils) and TLS with
//! a certificate for `localhost` from a test CA (rcgen); hako is pointed at the CA with
//! `SSL_CERT_FILE` and at the login with a docker `config.json` ([`TestRegistry::env`]).

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;

/// The login the secured registry takes.
pub const USER: &str = "hako-tester";
pub const PASSWORD: &str = "registry-password-7f3a";
/// The service and issuer of the token-auth registry's tokens.
pub const TOKEN_SERVICE: &str = "hako-test-registry";
pub const TOKEN_ISSUER: &str = "hako-test-issuer";
/// How long a start may take before the test fails (it takes well under a second).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running registry.
pub struct TestRegistry {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
    secured: bool,
}

impl TestRegistry {
    /// A registry over plain HTTP with no auth, on 127.0.0.1.
    pub fn plain() -> TestRegistry {
        TestRegistry::start(false, None)
    }

    /// A registry over TLS (a test CA's certificate for `localhost`) with basic auth.
    pub fn secured() -> TestRegistry {
        TestRegistry::start(true, None)
    }

    /// A registry over plain HTTP that takes only bearer tokens: its challenges name `realm`,
    /// service [`TOKEN_SERVICE`], and it accepts tokens signed by the certificate in `bundle`
    /// (PEM) and issued by [`TOKEN_ISSUER`] (the distribution registry's token auth).
    pub fn token_auth(realm: &str, bundle: &Path) -> TestRegistry {
        TestRegistry::start(false, Some((realm.to_string(), bundle.to_path_buf())))
    }

    fn start(secured: bool, token: Option<(String, PathBuf)>) -> TestRegistry {
        let dir = tempfile::tempdir().expect("a registry folder");
        let port = super::seaweed::free_ports(1)[0];
        let mut config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n\
             storage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    enabled: true\n\
             http:\n  addr: 127.0.0.1:{port}\n  secret: hako-test-secret\n",
            data = dir.path().join("data").display(),
        );
        if secured {
            let (cert, key, ca) = certificates();
            std::fs::write(dir.path().join("cert.pem"), cert).unwrap();
            std::fs::write(dir.path().join("key.pem"), key).unwrap();
            std::fs::write(dir.path().join("ca.pem"), ca).unwrap();
            let htpasswd = Command::new("htpasswd")
                .args(["-Bbn", USER, PASSWORD])
                .output()
                .expect("htpasswd (apache2-utils) runs");
            assert!(htpasswd.status.success(), "htpasswd failed");
            std::fs::write(dir.path().join("htpasswd"), htpasswd.stdout).unwrap();
            config.push_str(&format!(
                "  tls:\n    certificate: {cert}\n    key: {key}\n\
                 auth:\n  htpasswd:\n    realm: hako-test\n    path: {htpasswd}\n",
                cert = dir.path().join("cert.pem").display(),
                key = dir.path().join("key.pem").display(),
                htpasswd = dir.path().join("htpasswd").display(),
            ));
            let login =
                base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
            let auths =
                serde_json::json!({"auths": {format!("localhost:{port}"): {"auth": login}}});
            std::fs::write(dir.path().join("config.json"), auths.to_string()).unwrap();
        }
        if let Some((realm, bundle)) = token {
            config.push_str(&format!(
                "auth:\n  token:\n    realm: {realm}\n    service: {TOKEN_SERVICE}\n    \
                 issuer: {TOKEN_ISSUER}\n    rootcertbundle: {}\n",
                bundle.display()
            ));
        }
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let child = Command::new(registry_binary())
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("docker-registry (Debian's docker-registry package) starts");
        let registry = TestRegistry {
            child,
            port,
            dir,
            secured,
        };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < START_TIMEOUT,
                "the registry did not listen within {START_TIMEOUT:?}: {}",
                registry.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        registry
    }

    /// `host:port` as references name it.
    pub fn address(&self) -> String {
        if self.secured {
            format!("localhost:{}", self.port)
        } else {
            format!("127.0.0.1:{}", self.port)
        }
    }

    /// `oci://ADDRESS/REPOSITORY_AND_TAG`.
    pub fn reference(&self, repository_and_tag: &str) -> String {
        format!("oci://{}/{repository_and_tag}", self.address())
    }

    /// The docker `config.json` with the login (the secured registry's).
    pub fn auth_file(&self) -> PathBuf {
        self.dir.path().join("config.json")
    }

    /// The test CA's certificate (the secured registry's).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// What `hako` needs to reach it: the CA as its trust roots, and the login.
    pub fn env(&self) -> Vec<(&'static str, PathBuf)> {
        if !self.secured {
            return Vec::new();
        }
        vec![
            ("SSL_CERT_FILE", self.ca_file()),
            ("REGISTRY_AUTH_FILE", self.auth_file()),
        ]
    }

    /// A `hako` command with [`TestRegistry::env`] set and `store` as its store.
    pub fn hako(&self, store: &Path) -> Command {
        let mut command = super::hako_command();
        command
            .env("HAKO_STORE", store)
            .env_remove("REGISTRY_AUTH_FILE");
        for (name, value) in self.env() {
            command.env(name, value);
        }
        command
    }

    /// The folder the registry stores blobs in.
    pub fn storage(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn registry_binary() -> &'static str {
    for candidate in ["/usr/bin/docker-registry", "/usr/sbin/docker-registry"] {
        if Path::new(candidate).exists() {
            return candidate;
        }
    }
    "docker-registry"
}

/// A server certificate and key for `localhost`, and the CA that signed it, PEM.
fn certificates() -> (String, String, String) {
    let certificates = super::https::TestCertificates::new(&["localhost"]);
    (
        certificates.leaf_pem,
        certificates.key_pem,
        certificates.ca_pem,
    )
}
