//! The tuning cache: measured rankings keyed by everything that decides them, persisted as a
//! readable JSON file.
//!
//! - **Key** ([`CacheKey`]): a tagged key: the operation's tag, its problem as it serialises
//!   (for a convolution: shapes, layouts and strides, element type, groups, padding, stride,
//!   dilation, mode, epilogue kind), the element types, the math mode, the thread count, the
//!   CPU model string, the instruction set, and the library version. Loaded keys validate
//!   themselves: the problem of every entry is rebuilt through its operation's validating
//!   constructors ([`crate::op::problem_is_valid`]), whatever the operation.
//! - **Value** ([`CacheEntry`]): the ranked records `{algo, status, ms, workspace_bytes,
//!   deterministic}` of every algorithm that accepted the problem, and how they were made.
//! - **File**: `{"format": "autodnn-tuning-cache", "version": 2, "entries": [...]}`, written
//!   atomically (a temporary file in the same directory, then a rename) while holding an
//!   advisory lock on `FILE.lock`; the writer reads the file again under the lock and merges,
//!   so several processes sharing one file keep each other's entries. The lock is the
//!   operating system's (`flock`/`LockFileEx`), released when its holder exits however it
//!   exits, so a writer killed mid-write blocks no one; its temporary file is removed by the
//!   next writer. `FILE.lock` is made on the first write and left in place. Entries for
//!   other machines, thread counts or library versions are kept (and written back) but never
//!   match.
//! - **Readers write nothing**: [`TuningCache::load_read_only`] (for commands that only read
//!   the cache) and [`TuningCache::read`] take no lock and create, rename or change nothing;
//!   a file that is not a tuning cache of a format version this build reads (corrupt,
//!   truncated, not JSON, another version) is an error naming it. Version 1 files (before
//!   the key named its types and math mode) read as forward-convolution entries in f32,
//!   strict math; saving writes version 2. [`TuningCache::load`] (for a writer) reads it as
//!   empty with a warning and leaves it too; only a write ([`TuningCache::save`],
//!   [`TuningCache::overwrite`]) sets such a file aside as `FILE.bak` (or the first free
//!   `FILE.bak.N`), with a warning on stderr, so that it is never destroyed.
//! - **Folders**: a cache path whose folder does not exist, or that is itself a folder, is an
//!   error ([`Error::BadParam`] `cache.path`) for readers and writers alike; the one exception
//!   is the per-user default path ([`crate::default_cache_path`] without `$AUTODNN_CACHE`),
//!   whose folder is autodnn's own: missing, it reads as an empty cache, and the first write
//!   makes it.
//! - **Noise guard**: a new measurement replaces a cached choice only when its winner beats
//!   the cached winner, measured in the same run, by more than [`NOISE_MARGIN`].

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::{AlgoPerf, PerfStatus, Source};
use crate::cpu::Isa;
use crate::error::{Error, Result};
use crate::op::OpProblem;

/// The `format` field of a tuning-cache file.
pub const CACHE_FORMAT: &str = "autodnn-tuning-cache";
/// The version of the file format this build writes.
pub const CACHE_FORMAT_VERSION: u32 = 2;
/// The oldest version this build reads (version 1 keys lack the types and math mode).
pub const CACHE_FORMAT_OLDEST: u32 = 1;
/// The math mode of keys that name none (version 1 files; every f32 problem today).
pub const STRICT_MATH: &str = "strict";
/// A cached choice is replaced only when a new measurement beats it by more than this fraction.
pub const NOISE_MARGIN: f64 = 0.05;

/// What a cached ranking depends on: a tagged key, valid for any operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheKey {
    /// The operation's tag ([`OpProblem::op_tag`]).
    pub op: String,
    /// The problem, as its operation serialises it.
    pub problem: serde_json::Value,
    /// The element types ([`OpProblem::types`]).
    #[serde(default = "f32_types")]
    pub types: String,
    /// The math mode.
    #[serde(default = "strict_math")]
    pub math: String,
    /// Worker threads.
    pub threads: usize,
    /// The CPU's model string.
    pub cpu: String,
    /// The instruction set the kernels use.
    pub isa: Isa,
    /// The library version.
    pub version: String,
    /// Measured for calls with prepared weights ([`crate::Handle::set_prepared_selection`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prepared: bool,
}

fn f32_types() -> String {
    "f32".into()
}
fn strict_math() -> String {
    STRICT_MATH.into()
}

impl Hash for CacheKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.op.hash(state);
        // serde_json's maps keep their keys sorted: equal values print alike.
        self.problem.to_string().hash(state);
        self.types.hash(state);
        self.math.hash(state);
        self.threads.hash(state);
        self.cpu.hash(state);
        self.isa.hash(state);
        self.version.hash(state);
        self.prepared.hash(state);
    }
}

impl CacheKey {
    /// The key of `problem` on this machine with `threads` and `isa`, for this library version.
    pub fn new<P: OpProblem>(problem: &P, threads: usize, isa: Isa) -> CacheKey {
        CacheKey {
            op: problem.op_tag().into(),
            problem: serde_json::to_value(problem).unwrap_or(serde_json::Value::Null),
            types: problem.types(),
            math: STRICT_MATH.into(),
            threads,
            cpu: cpu_model(),
            isa,
            version: crate::VERSION.into(),
            prepared: false,
        }
    }

    /// The key for calls with prepared weights (`true`) or plain ones.
    pub fn with_prepared(mut self, prepared: bool) -> CacheKey {
        self.prepared = prepared;
        self
    }

    /// The key with another math mode ([`crate::runtime::ExecContext::math_key`]; `new` names
    /// [`STRICT_MATH`]).
    pub fn with_math(mut self, math: impl Into<String>) -> CacheKey {
        self.math = math.into();
        self
    }

    /// The problem as a value of `P` (the operation's problem type), when it is one.
    pub fn problem_as<P: OpProblem>(&self) -> Option<P> {
        serde_json::from_value(self.problem.clone()).ok()
    }

    /// True when the key was made on this CPU with this library version.
    pub fn is_this_machine(&self) -> bool {
        self.cpu == cpu_model() && self.version == crate::VERSION
    }

    /// False when its problem is not a valid problem of its operation (see
    /// [`crate::op::problem_is_valid`]; keys of operations this build does not know count as
    /// valid: they are kept, and only an operation of their tag reads them).
    pub fn is_valid(&self) -> bool {
        crate::op::problem_is_valid(&self.op, &self.problem) != Some(false)
    }
}

/// A cached ranking.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheEntry {
    /// How it was measured: `benchmark` or `exhaustive`.
    pub source: Source,
    /// Every algorithm that accepted the problem, the choice first.
    pub records: Vec<AlgoPerf>,
    /// Milliseconds the measurement took.
    pub tuning_ms: f64,
}

impl CacheEntry {
    /// The chosen algorithm's record.
    pub fn best(&self) -> Option<&AlgoPerf> {
        self.records.first().filter(|r| r.status == PerfStatus::Ok)
    }
    fn ms_of(&self, algo: &str) -> Option<f64> {
        self.records
            .iter()
            .find(|r| r.algo == algo && r.status != PerfStatus::Failed)
            .and_then(|r| r.ms)
    }
}

/// The entry to keep when `new` is measured for a key that holds `old`: `new`, unless its
/// winner differs from `old`'s and does not beat it by more than [`NOISE_MARGIN`] in `new`'s
/// own measurements, in which case `new` is kept with `old`'s winner moved to the front.
pub fn noise_guard(old: &CacheEntry, mut new: CacheEntry) -> CacheEntry {
    let (Some(old_best), Some(new_best)) = (old.best(), new.best()) else {
        return new;
    };
    if old_best.algo == new_best.algo {
        return new;
    }
    let new_ms = new_best.ms.unwrap_or(f64::INFINITY);
    // The old winner's time in the same run; eliminated or unmeasured counts as beaten.
    let Some(old_now) = new.ms_of(&old_best.algo) else {
        return new;
    };
    let old_pos = new.records.iter().position(|r| r.algo == old_best.algo);
    match old_pos {
        Some(i)
            if new_ms >= old_now * (1.0 - NOISE_MARGIN)
                && new.records[i].status != PerfStatus::Failed =>
        {
            let mut r = new.records.remove(i);
            r.status = PerfStatus::Ok;
            new.records.insert(0, r);
            new
        }
        _ => new,
    }
}

/// The tuning cache: in memory, loaded from and saved to a file.
#[derive(Debug, Clone, Default)]
pub struct TuningCache {
    entries: HashMap<CacheKey, CacheEntry>,
    /// Keys changed since loading: these win when merging with the file on save.
    dirty: HashSet<CacheKey>,
    warnings: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct FileEntry {
    key: CacheKey,
    value: CacheEntry,
}

#[derive(Serialize, Deserialize)]
struct FileHeader {
    format: String,
    version: u32,
}

#[derive(Serialize, Deserialize)]
struct CacheFile {
    format: String,
    version: u32,
    entries: Vec<FileEntry>,
}

impl TuningCache {
    /// An empty cache.
    pub fn new() -> TuningCache {
        TuningCache::default()
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// True when no entry is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry for `key`.
    pub fn get(&self, key: &CacheKey) -> Option<&CacheEntry> {
        self.entries.get(key)
    }

    /// Every entry, in a stable order (by the key's JSON).
    pub fn entries(&self) -> Vec<(&CacheKey, &CacheEntry)> {
        let mut v: Vec<(String, &CacheKey, &CacheEntry)> = self
            .entries
            .iter()
            .map(|(k, e)| (serde_json::to_string(k).unwrap_or_default(), k, e))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v.into_iter().map(|(_, k, e)| (k, e)).collect()
    }

    /// Warnings from loading (a file set aside, entries dropped); each was also printed on
    /// stderr.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Stores a new measurement for `key`, through the [`noise_guard`] when an entry exists.
    pub fn insert(&mut self, key: CacheKey, entry: CacheEntry) {
        let entry = match self.entries.get(&key) {
            Some(old) => noise_guard(old, entry),
            None => entry,
        };
        self.dirty.insert(key.clone());
        self.entries.insert(key, entry);
    }

    /// Adds the entries of `other`: new keys are taken; for a key both hold, the entry whose
    /// choice is faster is kept. Returns the number of entries taken from `other`.
    pub fn merge(&mut self, other: &TuningCache) -> usize {
        let mut taken = 0;
        for (k, e) in &other.entries {
            let take = match self.entries.get(k) {
                None => true,
                Some(mine) => {
                    let ms = |e: &CacheEntry| e.best().and_then(|b| b.ms).unwrap_or(f64::INFINITY);
                    ms(e) < ms(mine)
                }
            };
            if take {
                self.entries.insert(k.clone(), e.clone());
                self.dirty.insert(k.clone());
                taken += 1;
            }
        }
        taken
    }

    /// Removes every entry (the file is emptied on the next save).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.dirty.clear();
    }

    fn warn(&mut self, msg: String) {
        eprintln!("autodnn: warning: {msg}");
        self.warnings.push(msg);
    }

    /// Reads the cache at `path` for a writer, leaving the file as it is: a missing file
    /// gives an empty cache, and so does a corrupt or truncated file or one of another format
    /// version, with a warning that saving will set it aside (as the first free
    /// `FILE.bak[.N]`). Entries whose problem is not valid are dropped with a warning. Takes no lock
    /// (files are replaced atomically) and creates nothing.
    ///
    /// # Errors
    /// [`Error::BadParam`] (`cache.path`) when the file's folder does not exist (see the
    /// [module](self) docs); [`Error::Io`] when the file exists but cannot be read.
    pub fn load(path: &Path) -> Result<TuningCache> {
        let mut cache = TuningCache::new();
        let Some(bytes) = read_if_present(path)? else {
            return Ok(cache);
        };
        match parse_file(&bytes) {
            Ok(file) => cache.take_valid(path, file),
            Err(why) => cache.warn(format!(
                "tuning cache {}: {why}; it is left as it is until the cache is saved, which \
                 sets it aside",
                path.display()
            )),
        }
        Ok(cache)
    }

    /// Reads the cache at `path` for a reader that writes nothing: as [`TuningCache::load`]
    /// for a missing file and for invalid entries, but a file that is not a tuning cache of
    /// this format version is an error. Takes no lock and creates nothing.
    ///
    /// # Errors
    /// [`Error::BadParam`] (`cache.path`) when the file's folder does not exist,
    /// [`Error::BadParam`] (`cache.file`) when the file is not a valid tuning cache,
    /// [`Error::Io`] when it cannot be read.
    pub fn load_read_only(path: &Path) -> Result<TuningCache> {
        let mut cache = TuningCache::new();
        let Some(bytes) = read_if_present(path)? else {
            return Ok(cache);
        };
        let file = parse_file(&bytes).map_err(|why| not_a_cache(path, why))?;
        cache.take_valid(path, file);
        Ok(cache)
    }

    /// Reads a cache file strictly, leaving it where it is: for files to merge or inspect.
    ///
    /// # Errors
    /// [`Error::Io`] when it cannot be read (a missing file included);
    /// [`Error::BadParam`] (`cache.file`) when it is not a cache file of this format version
    /// or holds an invalid problem.
    pub fn read(path: &Path) -> Result<TuningCache> {
        let bytes = std::fs::read(path).map_err(|e| io_error(path, e))?;
        TuningCache::parse_strict(&bytes, path)
    }

    /// Parses the bytes of a cache file strictly, as [`TuningCache::read`] reads a file.
    ///
    /// # Errors
    /// [`Error::BadParam`] (`cache.file`, valued `tuning cache`) when the bytes are not a
    /// cache file of this format version, or hold an invalid problem.
    pub fn parse(bytes: &[u8]) -> Result<TuningCache> {
        TuningCache::parse_strict(bytes, Path::new("tuning cache"))
    }

    fn parse_strict(bytes: &[u8], path: &Path) -> Result<TuningCache> {
        let file = parse_file(bytes).map_err(|m| not_a_cache(path, m))?;
        let mut cache = TuningCache::new();
        for FileEntry { key, value } in file.entries {
            if !key.is_valid() {
                return Err(not_a_cache(path, "an entry holds an invalid problem"));
            }
            cache.entries.insert(key, value);
        }
        Ok(cache)
    }

    /// Adds a parsed file's entries with valid problems for the keys this cache has not
    /// changed; warns of the others.
    fn take_valid(&mut self, path: &Path, file: CacheFile) {
        let mut dropped = 0;
        for FileEntry { key, value } in file.entries {
            if !key.is_valid() {
                dropped += 1;
                continue;
            }
            if !self.dirty.contains(&key) {
                self.entries.insert(key, value);
            }
        }
        if dropped > 0 {
            self.warn(format!(
                "tuning cache {}: dropped {dropped} entries with invalid problems",
                path.display()
            ));
        }
    }

    /// Under the caller's lock: reads the file at `path` and adds its entries for the keys
    /// this cache has not changed; a file that is not a tuning cache is set aside (renamed to
    /// a free `FILE.bak`, `FILE.bak.1`, ...) with a warning, so that writing cannot destroy it.
    fn read_merge(&mut self, path: &Path) -> Result<()> {
        let Some(bytes) = read_if_present(path)? else {
            return Ok(());
        };
        match parse_file(&bytes) {
            Ok(file) => self.take_valid(path, file),
            Err(why) => self.set_aside(path, &why)?,
        }
        Ok(())
    }

    fn set_aside(&mut self, path: &Path, why: &str) -> Result<()> {
        let bak = free_backup_path(path);
        std::fs::rename(path, &bak).map_err(|e| {
            io_error(
                path,
                format!("{why}; could not set it aside as {} ({e})", bak.display()),
            )
        })?;
        self.warn(format!(
            "tuning cache {}: {why}; set aside as {} and rebuilt",
            path.display(),
            bak.display()
        ));
        Ok(())
    }

    /// Writes the cache to `path`: under the lock, the file is read again and merged (this
    /// cache's changes win), then replaced atomically. Afterwards this cache holds the merged
    /// entries. A file there that is not a tuning cache is set aside first, with a warning.
    ///
    /// # Errors
    /// [`Error::BadParam`] (`cache.path`) when the file's folder does not exist (except the
    /// per-user default's, which is made); [`Error::Io`] when the lock or the file cannot be
    /// written.
    pub fn save(&mut self, path: &Path) -> Result<()> {
        let _lock = FileLock::acquire(path)?;
        self.read_merge(path)?;
        let text = self.to_json()?;
        write_atomically(path, text.as_bytes())?;
        self.dirty.clear();
        Ok(())
    }

    /// Replaces the file at `path` with this cache's entries alone (no merge), under the lock.
    /// A file there that is not a tuning cache is set aside first, with a warning.
    ///
    /// # Errors
    /// As [`TuningCache::save`].
    pub fn overwrite(&mut self, path: &Path) -> Result<()> {
        let _lock = FileLock::acquire(path)?;
        if let Some(bytes) = read_if_present(path)? {
            if let Err(why) = parse_file(&bytes) {
                self.set_aside(path, &why)?;
            }
        }
        let text = self.to_json()?;
        write_atomically(path, text.as_bytes())?;
        self.dirty.clear();
        Ok(())
    }

    /// The file's text.
    ///
    /// # Errors
    /// [`Error::Io`] if encoding fails.
    pub fn to_json(&self) -> Result<String> {
        let file = CacheFile {
            format: CACHE_FORMAT.into(),
            version: CACHE_FORMAT_VERSION,
            entries: self
                .entries()
                .into_iter()
                .map(|(k, v)| FileEntry {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
        };
        serde_json::to_string_pretty(&file).map_err(|e| Error::Io {
            path: "tuning cache".into(),
            message: e.to_string(),
        })
    }
}

fn parse_file(bytes: &[u8]) -> std::result::Result<CacheFile, String> {
    let header: FileHeader =
        serde_json::from_slice(bytes).map_err(|e| format!("not a valid cache file ({e})"))?;
    if header.format != CACHE_FORMAT {
        return Err(format!(
            "format {:?}, expected {CACHE_FORMAT:?}",
            header.format
        ));
    }
    if !(CACHE_FORMAT_OLDEST..=CACHE_FORMAT_VERSION).contains(&header.version) {
        return Err(format!(
            "file format version {}, this build reads versions {CACHE_FORMAT_OLDEST} to \
             {CACHE_FORMAT_VERSION}",
            header.version
        ));
    }
    serde_json::from_slice(bytes).map_err(|e| format!("not a valid cache file ({e})"))
}

/// The default per-user path of the tuning cache: `$AUTODNN_CACHE` if set, else
/// `$XDG_CACHE_HOME/autodnn/tuning.json`, else `$HOME/.cache/autodnn/tuning.json` (on Windows
/// `%LOCALAPPDATA%\autodnn\tuning.json`). The folder of the per-user path is made on the first
/// write; the folder of a path from `$AUTODNN_CACHE` must exist (see the [module](self) docs).
pub fn default_cache_path() -> std::path::PathBuf {
    match std::env::var_os("AUTODNN_CACHE").filter(|v| !v.is_empty()) {
        Some(p) => std::path::PathBuf::from(p),
        None => per_user_cache_path(),
    }
}

/// The per-user path of the tuning cache, ignoring `$AUTODNN_CACHE`: its folder is autodnn's
/// own, made on the first write.
pub(crate) fn per_user_cache_path() -> std::path::PathBuf {
    use std::path::PathBuf;
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let base = env("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .or_else(|| env("LOCALAPPDATA").map(PathBuf::from))
        .unwrap_or_else(std::env::temp_dir);
    base.join("autodnn").join("tuning.json")
}

fn io_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

fn not_a_cache(path: &Path, why: impl Into<String>) -> Error {
    Error::BadParam {
        field: "cache.file".into(),
        value: path.display().to_string(),
        reason: format!("not a tuning cache: {}", why.into()),
    }
}

/// The folder `path` is in (`.` for a bare file name).
fn folder_of(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Whether the folder of `path` exists: `Ok(true)` when it does; for the per-user default
/// path (autodnn's own folder) `Ok(false)` when it does not, or, with `create`, it is made;
/// an error for any other path whose folder does not exist, and for a path that is a folder.
fn folder_ready(path: &Path, create: bool) -> Result<bool> {
    let dir = folder_of(path);
    let missing = |why: &str| Error::BadParam {
        field: "cache.path".into(),
        value: path.display().to_string(),
        reason: format!("folder {} {why}", dir.display()),
    };
    if path.is_dir() {
        return Err(Error::BadParam {
            field: "cache.path".into(),
            value: path.display().to_string(),
            reason: "a folder, not a file".into(),
        });
    }
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(true),
        Ok(_) => Err(missing("is not a folder")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if path != per_user_cache_path() {
                Err(missing("does not exist"))
            } else if create {
                std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
                Ok(true)
            } else {
                Ok(false)
            }
        }
        Err(e) => Err(io_error(dir, e)),
    }
}

/// The file's bytes, or `None` when there is no file (in an existing folder, or in the
/// per-user default's missing folder).
fn read_if_present(path: &Path) -> Result<Option<Vec<u8>>> {
    if !folder_ready(path, false)? {
        return Ok(None);
    }
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(path, e)),
    }
}

/// Where a bad file is set aside: `FILE.bak` (or, when that is taken, the first free of
/// `FILE.bak.1`, `FILE.bak.2`, ...).
pub fn backup_path(path: &Path) -> PathBuf {
    sibling(path, ".bak")
}

fn free_backup_path(path: &Path) -> PathBuf {
    let first = backup_path(path);
    if !first.exists() {
        return first;
    }
    (1..)
        .map(|i| sibling(path, &format!(".bak.{i}")))
        .find(|p| !p.exists())
        .unwrap_or(first)
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// An advisory exclusive lock on `FILE.lock` (made on the first write and left in place),
/// held until dropped. The operating system releases it when the holder exits, however it
/// exits: a writer killed while holding it blocks no one.
struct FileLock(File);

impl FileLock {
    fn acquire(path: &Path) -> Result<FileLock> {
        folder_ready(path, true)?;
        let lock_path = sibling(path, ".lock");
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io_error(&lock_path, e))?;
        f.lock().map_err(|e| io_error(&lock_path, e))?;
        remove_stale_temporaries(path);
        Ok(FileLock(f))
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// Removes `FILE.tmp.*` left by writers killed between writing and renaming: only the lock's
/// holder writes them, so under the lock every one is stale.
fn remove_stale_temporaries(path: &Path) {
    let (Some(name), Ok(list)) = (path.file_name(), std::fs::read_dir(folder_of(path))) else {
        return;
    };
    let mut prefix = name.to_owned();
    prefix.push(".tmp.");
    let prefix = prefix.to_string_lossy().into_owned();
    for entry in list.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, flushed to
/// disk, then renamed over `path`. Creates the directory (the cache's writers check its
/// folder first, see the [module](self) docs).
///
/// # Errors
/// [`Error::Io`].
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = folder_of(path);
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = sibling(path, &format!(".tmp.{}.{nanos}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io_error(path, e)
    })
}

/// The CPU's model string (the CPUID brand string on x86-64), e.g. `AMD EPYC 9R14`.
pub fn cpu_model() -> String {
    static MODEL: OnceLock<String> = OnceLock::new();
    MODEL.get_or_init(detect_cpu_model).clone()
}

fn detect_cpu_model() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        let max = __cpuid(0x8000_0000).eax;
        if max >= 0x8000_0004 {
            let mut bytes = Vec::with_capacity(48);
            for leaf in 0x8000_0002u32..=0x8000_0004 {
                let r = __cpuid(leaf);
                for v in [r.eax, r.ebx, r.ecx, r.edx] {
                    bytes.extend_from_slice(&v.to_le_bytes());
                }
            }
            let s: String = String::from_utf8_lossy(&bytes)
                .trim_matches(char::from(0))
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            if !s.is_empty() {
                return s;
            }
        }
    }
    format!("unknown {}", std::env::consts::ARCH)
}
