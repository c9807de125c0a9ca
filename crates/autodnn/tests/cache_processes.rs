//! The tuning-cache file shared by processes (a test binary without the standard harness: it
//! runs itself as the writer processes, picked by `AUTODNN_CACHE_TEST_WORKER`).
//!
//! - Four processes save 200 entries each into one file at once, while this process reads
//!   the file strictly over and over: every read is a whole cache whose entries never go
//!   missing, and at the end the file holds all 800.
//! - A writer killed (SIGKILL on Unix) at varied moments of its saves, 50 times: the file
//!   afterwards is byte for byte one of the generations written, never a torn one; the lock
//!   is free again at once, and the next writer proceeds (and removes the temporary file a
//!   killed writer may leave).

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use autodnn::cpu::Isa;
use autodnn::select::cache::{CacheEntry, CacheKey, TuningCache};
use autodnn::select::{AlgoPerf, PerfStatus, Source};
use autodnn::{Layout, ProblemSpec};

const WORKER: &str = "AUTODNN_CACHE_TEST_WORKER";
const WRITERS: usize = 4;
const WRITES: usize = 200;
const KILLS: usize = 50;
/// Entries of every generation the killed writer writes: enough that a save takes a while.
const KILL_ENTRIES: usize = 300;
/// How long a writer may take to get going before the test calls it stuck (a lock that
/// was never released): a bound on liveness, far above any real wait.
const STUCK: Duration = Duration::from_secs(60);

fn key(writer: usize, j: usize) -> CacheKey {
    let p = ProblemSpec::parse("mb1ic4ih8oc8kh3ph1")
        .unwrap()
        .to_problem(Layout::Nchw)
        .unwrap();
    // Distinct keys through the thread count: writer w owns 1000·(w+1) + j.
    CacheKey::new(&p, 1000 * (writer + 1) + j, Isa::Scalar)
}

fn entry(ms: f64) -> CacheEntry {
    CacheEntry {
        source: Source::Benchmark,
        records: vec![AlgoPerf {
            algo: "direct".into(),
            status: PerfStatus::Ok,
            ms: Some(ms),
            workspace_bytes: 0,
            deterministic: true,
            note: None,
            prepare_ms: None,
            prepared_bytes: None,
        }],
        tuning_ms: ms,
    }
}

/// The cache the killed writer saves as generation `g`: the same keys every time, `g` in
/// every entry's time.
fn generation(g: usize) -> TuningCache {
    let mut c = TuningCache::new();
    for j in 0..KILL_ENTRIES {
        c.insert(key(9, j), entry(g as f64 + j as f64 / 1000.0));
    }
    c
}

fn generation_of(c: &TuningCache) -> usize {
    c.get(&key(9, 0)).expect("generation entry").tuning_ms as usize
}

/// Fails the check: a panic, so that the writers still running are killed on the way out.
fn fail(msg: String) -> ! {
    panic!("{msg}");
}

/// A writer process, killed (if still running) and reaped when dropped.
struct Kid(Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn worker(spec: &str) {
    let parts: Vec<&str> = spec.splitn(3, ':').collect();
    let path = PathBuf::from(parts[2]);
    match parts[0] {
        // `writer:W:PATH`: 200 saves, each adding one entry of its own.
        "writer" => {
            let w: usize = parts[1].parse().unwrap();
            let mut cache = TuningCache::load(&path).unwrap();
            for j in 0..WRITES {
                cache.insert(key(w, j), entry(j as f64));
                cache.save(&path).unwrap();
            }
            // Everything this writer saw, its own entries and the others', is still there.
            let last = TuningCache::read(&path).unwrap();
            for (k, _) in cache.entries() {
                assert!(last.get(k).is_some(), "writer {w} lost {}", k.threads);
            }
        }
        // `generations:N:PATH`: saves generation after generation (N of them, or forever
        // for 0), reporting each on stdout.
        "generations" => {
            let n: usize = parts[1].parse().unwrap();
            let start = match TuningCache::load_read_only(&path).unwrap() {
                c if c.is_empty() => 0,
                c => generation_of(&c),
            };
            println!("ready {start}");
            for g in (start + 1..).take(if n == 0 { usize::MAX } else { n }) {
                let mut c = generation(g);
                c.save(&path).unwrap();
                println!("saved {g}");
            }
        }
        other => panic!("unknown worker {other:?}"),
    }
}

fn spawn(spec: String) -> Kid {
    Kid(Command::new(std::env::current_exe().unwrap())
        .env(WORKER, spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap())
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("autodnn-procs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect()
}

/// Four writers at once, each saving 200 entries of its own, read strictly throughout.
fn four_writers_keep_every_entry() -> String {
    let dir = temp_dir("writers");
    let path = dir.join("tuning.json");
    let mut children: Vec<Kid> = (0..WRITERS)
        .map(|w| spawn(format!("writer:{w}:{}", path.display())))
        .collect();
    let (mut reads, mut most) = (0usize, 0usize);
    let mut running = true;
    while running {
        running = false;
        for c in &mut children {
            if c.0.try_wait().unwrap().is_none() {
                running = true;
            }
        }
        if !path.exists() {
            std::thread::yield_now();
            continue;
        }
        let c = TuningCache::read(&path)
            .unwrap_or_else(|e| fail(format!("read {reads}: a torn cache file: {e}")));
        reads += 1;
        if c.len() < most {
            fail(format!(
                "read {reads}: {} entries after {most}: a save lost others' entries",
                c.len()
            ));
        }
        most = c.len();
    }
    for (w, c) in children.iter_mut().enumerate() {
        let status = c.0.wait().unwrap();
        if !status.success() {
            fail(format!("writer {w} failed: {status}"));
        }
    }
    let c = TuningCache::read(&path).unwrap();
    let want: BTreeSet<usize> = (0..WRITERS)
        .flat_map(|w| (0..WRITES).map(move |j| key(w, j).threads))
        .collect();
    let got: BTreeSet<usize> = c.entries().iter().map(|(k, _)| k.threads).collect();
    if got != want {
        let lost: Vec<_> = want.difference(&got).take(10).collect();
        fail(format!(
            "{} of {} entries kept; lost e.g. {lost:?}",
            got.len(),
            want.len()
        ));
    }
    if !leftovers(&dir).is_empty() {
        fail(format!("temporary files left: {:?}", leftovers(&dir)));
    }
    let _ = std::fs::remove_dir_all(&dir);
    format!(
        "{WRITERS} processes x {WRITES} saves: {} entries kept, {reads} strict reads meanwhile",
        c.len()
    )
}

/// The lines a child prints, through a channel (so that a stuck child can be noticed).
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn number(line: &str, word: &str) -> usize {
    line.strip_prefix(word)
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| fail(format!("unexpected line {line:?}")))
}

/// A writer killed mid-save, again and again.
fn killed_writers_leave_old_or_new() -> String {
    let dir = temp_dir("kills");
    let path = dir.join("tuning.json");
    let lock = dir.join("tuning.json.lock");
    let (mut torn_risks, mut new_seen, mut old_seen) = (0usize, 0usize, 0usize);
    for round in 0..KILLS {
        let mut child = spawn(format!("generations:0:{}", path.display()));
        let rx = lines_of(&mut child.0);
        let ready = rx
            .recv_timeout(STUCK)
            .unwrap_or_else(|_| fail(format!("round {round}: the writer never started")));
        let start = number(&ready, "ready");
        // Varied moments: before the first save, and during the first few.
        std::thread::sleep(Duration::from_micros(((round * 7919) % 12_000) as u64));
        child.0.kill().unwrap();
        child.0.wait().unwrap();
        let mut last = start;
        while let Ok(line) = rx.recv_timeout(Duration::from_secs(10)) {
            last = number(&line, "saved");
        }
        if !leftovers(&dir).is_empty() {
            torn_risks += 1;
        }
        // The lock is free at once: the operating system released the killed holder's.
        let f = OpenOptions::new().write(true).open(&lock);
        if let Ok(f) = f {
            if f.try_lock().is_err() {
                fail(format!(
                    "round {round}: a killed writer's lock is still held"
                ));
            }
        }
        if !path.exists() {
            if last != 0 {
                fail(format!(
                    "round {round}: the file vanished after generation {last}"
                ));
            }
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let c = TuningCache::read(&path).unwrap_or_else(|e| {
            fail(format!(
                "round {round}: a torn file ({} bytes) after generation {last}: {e}",
                bytes.len()
            ))
        });
        let g = generation_of(&c);
        // The last reported generation, or the one whose rename landed before the report.
        if g != last && g != last + 1 {
            fail(format!(
                "round {round}: generation {g} on disk, {last} was the last saved"
            ));
        }
        if bytes != generation(g).to_json().unwrap().as_bytes() {
            fail(format!(
                "round {round}: generation {g} is not byte for byte as written"
            ));
        }
        if g == last + 1 {
            new_seen += 1;
        } else {
            old_seen += 1;
        }
    }
    // A last writer gets the lock, finishes, and removes what killed ones left.
    let mut child = spawn(format!("generations:3:{}", path.display()));
    let rx = lines_of(&mut child.0);
    for _ in 0..4 {
        rx.recv_timeout(STUCK)
            .unwrap_or_else(|_| fail("the writer after the kills is stuck".into()));
    }
    if !child.0.wait().unwrap().success() {
        fail("the writer after the kills failed".into());
    }
    let left = leftovers(&dir);
    if !left.is_empty() {
        fail(format!("temporary files left after a save: {left:?}"));
    }
    let g = generation_of(&TuningCache::read(&path).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    format!(
        "{KILLS} kills: the file was the old generation {old_seen} times, the new one \
         {new_seen} times, never torn; {torn_risks} kills left a temporary file (killed \
         mid-write); generation {g} at the end"
    )
}

fn main() {
    if let Ok(spec) = std::env::var(WORKER) {
        worker(&spec);
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        println!("four_writers_keep_every_entry: test");
        println!("killed_writers_leave_old_or_new: test");
        return;
    }
    // Words not starting with '-' filter the checks by name, as the standard harness does.
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    for (name, check) in [
        (
            "four_writers_keep_every_entry",
            four_writers_keep_every_entry as fn() -> String,
        ),
        (
            "killed_writers_leave_old_or_new",
            killed_writers_leave_old_or_new,
        ),
    ] {
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let summary = check();
        println!("test {name} ... ok ({summary})");
    }
}
