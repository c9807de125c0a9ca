//! The handle: worker threads, instruction-set cap, workspace budget, selection settings and
//! the tuning cache, as cuDNN's `cudnnHandle_t` holds a device context and stream.

mod activation;
mod backward;
mod gemm;
mod norm;
mod pool;
mod softmax;
mod tensor_ops;
mod transform;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use crate::cpu::{Features, Isa};
use crate::desc::ConvProblem;
use crate::error::{Error, Result};
use crate::op::conv_fwd::check_call;
use crate::op::epilogue::EpilogueArgs;
use crate::op::prepared::{PreparedWeights, Weights};
use crate::op::{Algorithm, ConvForward, ConvFwdInputs, Operation, Registered};
use crate::op::{Tensor, TensorMut};
use crate::runtime::pool::{ParallelRunner, Pool};
use crate::runtime::workspace::WorkspacePool;
use crate::runtime::ExecContext;
use crate::runtime::{Bf16Units, MathMode};
use crate::select::deploy::DeployedPlan;
use crate::select::heuristic::Machine;
use crate::select::{
    self, AlgoPerf, ConvPlan, CostModel, Env, FailAlloc, Mode, Plan, Policy, Ranked, RunReport,
    Settings, Source, TuningCache,
};

/// Where a handle's work runs. Buffers and streams belong to a backend; the CPU backend takes
/// host slices and runs on the handle's thread pool. A CUDA backend will join this list, with
/// device buffers and a stream of its own, behind the same descriptors and algorithm registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// Host memory, the handle's worker threads.
    Cpu,
}

/// A library context: worker threads, the instruction-set cap and a workspace budget.
///
/// Making a handle starts its worker threads; reuse one for many calls. A `Handle` is `Send`
/// and `Sync`: calls from several threads at once on one `&Handle` are safe and share its
/// worker pool (each call's parallel work is queued on the same threads, so concurrent calls
/// take turns rather than oversubscribing the cores). For independent streams of work that
/// should not share cores, make one handle per stream with the thread count each should use.
/// Every setter takes `&self` and may be called from any thread while calls run: a call works
/// with the settings it started with.
///
/// # Examples
/// ```
/// use autodnn::{Handle, ProblemSpec, Layout};
/// let handle = Handle::with_threads(1)?;
/// let p = ProblemSpec::parse("mb1ic4ih8oc8kh3ph1")?.to_problem(Layout::Nchw)?;
/// let x = vec![1.0f32; p.x().span()];
/// let w = vec![1.0f32; p.w().elements()];
/// let mut y = vec![0.0f32; p.y().span()];
/// handle.conv_forward(&p, "direct", &x, &w, &mut y)?;
/// assert_eq!(y[8 * 3 + 3], 4.0 * 9.0); // an interior point sees every tap
/// # Ok::<(), autodnn::Error>(())
/// ```
#[derive(Debug)]
pub struct Handle {
    /// The calling thread and `threads − 1` workers.
    pool: Arc<Pool>,
    backend: Backend,
    /// The settings, replaced whole by a setter (`&self`, from any thread); a call works
    /// with the snapshot it took when it started.
    config: RwLock<Arc<Config>>,
    shared: Arc<Shared>,
}

/// A handle's settings.
#[derive(Debug, Clone)]
struct Config {
    /// The widest preset within `features` (cache keys, logs).
    isa: Isa,
    /// The detected features within the cap's mask: what kernels may use.
    features: Features,
    /// The precision f32 operands may be computed in.
    math: MathMode,
    /// Which units compute products of bf16 values.
    bf16_units: Bf16Units,
    workspace_limit: Option<usize>,
    settings: Arc<Settings>,
}

impl Clone for Handle {
    /// Another handle on the same threads, tuning cache, cost model and workspace pool, with
    /// a copy of the settings (changing one handle's settings leaves the other's as they are).
    fn clone(&self) -> Handle {
        Handle {
            pool: self.pool.clone(),
            backend: self.backend,
            config: RwLock::new(self.config()),
            shared: self.shared.clone(),
        }
    }
}

/// State shared by a handle and its clones: the tuning cache, the cost model and the cached
/// workspace.
#[derive(Debug, Default)]
struct Shared {
    cache: RwLock<TuningCache>,
    cache_path: RwLock<Option<PathBuf>>,
    cost_model: RwLock<Option<Arc<CostModel>>>,
    workspace: WorkspacePool,
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    // Nothing behind these locks is left half-updated by a panic.
    l.read().unwrap_or_else(|e| e.into_inner())
}
fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

impl Handle {
    /// A CPU handle using every core (`std::thread::available_parallelism`).
    ///
    /// # Errors
    /// As [`Handle::with_threads`].
    pub fn new() -> Result<Handle> {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        Handle::with_threads(n)
    }

    /// A CPU handle computing on `threads` threads: the calling thread and `threads − 1`
    /// worker threads it starts (idle workers spin briefly, then sleep). The
    /// instruction set is the widest this machine has, capped by `AUTODNN_ISA` when set.
    /// Selection settings start from their defaults (policy `benchmark`, no determinism
    /// requirement, an empty tuning cache) with `AUTODNN_ALGO`, `AUTODNN_FAIL_ALLOC` and
    /// `AUTODNN_LOG` applied.
    ///
    /// # Errors
    /// [`Error::BadParam`] for 0 threads, a bad `AUTODNN_ISA` or `AUTODNN_FAIL_ALLOC`;
    /// [`Error::OutOfMemory`] when the threads cannot be started.
    pub fn with_threads(threads: usize) -> Result<Handle> {
        Handle::check_threads(threads)?;
        Handle::on_pool(Pool::new(threads, "autodnn")?)
    }

    /// A CPU handle whose parallel work runs on up to `threads` threads lent by `runner`
    /// (see [`ParallelRunner`]) rather than on threads of its own: for a program whose own
    /// thread team (OpenMP's, in PyTorch) runs between autodnn's calls, so that autodnn's
    /// work runs on that team instead of beside it. Otherwise as [`Handle::with_threads`].
    ///
    /// # Errors
    /// As [`Handle::with_threads`].
    pub fn with_runner(threads: usize, runner: Arc<ParallelRunner>) -> Result<Handle> {
        Handle::check_threads(threads)?;
        Handle::on_pool(Pool::with_runner(threads, runner))
    }

    fn check_threads(threads: usize) -> Result<()> {
        if threads == 0 {
            return Err(Error::bad("threads", 0, "must be at least 1"));
        }
        if threads > 4096 {
            return Err(Error::bad("threads", threads, "must be at most 4096"));
        }
        Ok(())
    }

    fn on_pool(pool: Pool) -> Result<Handle> {
        let features = Isa::cap_from_env()?.usable();
        let isa = Isa::widest_within(features);
        let settings = Settings::from_env()?;
        crate::alloc::FailNth::arm_from_env()?;
        Ok(Handle {
            pool: Arc::new(pool),
            backend: Backend::Cpu,
            config: RwLock::new(Arc::new(Config {
                isa,
                features,
                math: MathMode::Strict,
                bf16_units: Bf16Units::Auto,
                workspace_limit: None,
                settings: Arc::new(settings),
            })),
            shared: Arc::new(Shared::default()),
        })
    }

    /// Threads a call computes on: the calling thread and the workers (or the lent threads).
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }
    /// The backend this handle runs on.
    pub fn backend(&self) -> Backend {
        self.backend
    }
    /// The widest instruction-set preset within [`Handle::features`].
    pub fn isa(&self) -> Isa {
        self.config().isa
    }
    /// The processor features kernels may use: the detected ones within the cap's mask.
    pub fn features(&self) -> Features {
        self.config().features
    }
    /// Caps the instruction set: kernels may use the detected features within `cap`'s
    /// [`Isa::mask`] (a cap never adds a feature).
    pub fn set_isa_cap(&self, cap: Isa) {
        self.update(|c| {
            c.features = cap.usable();
            c.isa = Isa::widest_within(c.features);
        });
    }
    /// The precision f32 operands may be computed in ([`MathMode::Strict`] unless set).
    pub fn math_mode(&self) -> MathMode {
        self.config().math
    }
    /// Lets f32 operands be computed in reduced precision (or not): see [`MathMode`].
    pub fn set_math_mode(&self, mode: MathMode) {
        self.update(|c| c.math = mode);
    }
    /// Which units compute products of bf16 values ([`Bf16Units::Auto`] unless set).
    pub fn bf16_units(&self) -> Bf16Units {
        self.config().bf16_units
    }
    /// Chooses the units that compute products of bf16 values: see [`Bf16Units`].
    pub fn set_bf16_units(&self, units: Bf16Units) {
        self.update(|c| c.bf16_units = units);
    }
    /// Most workspace bytes one call may allocate; `None` means no limit.
    pub fn workspace_limit(&self) -> Option<usize> {
        self.config().workspace_limit
    }
    /// Sets the workspace budget: no algorithm the handle runs receives more. Cached workspace
    /// beyond it is released.
    pub fn set_workspace_limit(&self, bytes: Option<usize>) {
        self.update(|c| c.workspace_limit = bytes);
        if let Some(b) = bytes {
            if self.shared.workspace.cached_bytes() > b {
                self.shared.workspace.release();
            }
        }
    }

    /// The current settings.
    fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the settings with `f` applied to a copy of them.
    fn update(&self, f: impl FnOnce(&mut Config)) {
        let mut guard = self.config.write().unwrap_or_else(|e| e.into_inner());
        let mut c = Config::clone(&guard);
        f(&mut c);
        *guard = Arc::new(c);
    }

    /// Replaces the selection settings with `f` applied to a copy of them.
    fn update_settings(&self, f: impl FnOnce(&mut Settings)) {
        self.update(|c| {
            let mut s = Settings::clone(&c.settings);
            f(&mut s);
            c.settings = Arc::new(s);
        });
    }

    pub(crate) fn exec_context(&self) -> ExecContext<'_> {
        let c = self.config();
        ExecContext {
            pool: &self.pool,
            threads: self.pool.threads(),
            isa: c.isa,
            features: c.features,
            math: c.math,
            bf16_units: c.bf16_units,
        }
    }

    /// Workspace bytes `algo` needs for `problem`.
    ///
    /// # Errors
    /// [`Error::UnknownAlgorithm`], or [`Error::Declined`] when the algorithm does not accept
    /// the problem.
    pub fn conv_workspace_size(&self, problem: &ConvProblem, algo: &str) -> Result<usize> {
        self.workspace_size::<ConvForward>(problem, algo)
    }

    /// y = conv(x, w) with the named algorithm, its workspace allocated by the handle within
    /// the workspace budget.
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`] for a buffer shorter than its descriptor's span,
    /// [`Error::Unsupported`] for element types without kernels, [`Error::UnknownAlgorithm`],
    /// [`Error::Declined`] when the algorithm does not accept the problem,
    /// [`Error::OutOfMemory`] when its workspace exceeds the budget or cannot be allocated,
    /// [`Error::BadParam`] when the problem has an epilogue (use [`Handle::conv_forward_ex`]).
    pub fn conv_forward(
        &self,
        problem: &ConvProblem,
        algo: &str,
        x: &[f32],
        w: &[f32],
        y: &mut [f32],
    ) -> Result<()> {
        let epi = EpilogueArgs::default();
        self.conv_forward_ex(problem, algo, x, Weights::Plain(w), y, &epi, None)
    }

    /// y = conv(x, w) with the named algorithm and a workspace owned by the caller, as cuDNN's
    /// calls take a pointer and a size. The workspace must hold at least
    /// [`Handle::conv_workspace_size`] bytes; the handle's budget does not apply to it.
    ///
    /// # Errors
    /// As [`Handle::conv_forward`], and [`Error::WorkspaceTooSmall`].
    pub fn conv_forward_with_workspace(
        &self,
        problem: &ConvProblem,
        algo: &str,
        x: &[f32],
        w: &[f32],
        y: &mut [f32],
        workspace: &mut [u8],
    ) -> Result<()> {
        let epi = EpilogueArgs::default();
        self.conv_forward_ex(
            problem,
            algo,
            x,
            Weights::Plain(w),
            y,
            &epi,
            Some(workspace),
        )
    }

    /// The general call, as cuDNN's `ConvolutionBiasActivationForward`:
    /// y = act(alpha · conv(x, w) + bias + beta · z), with the activation, and whether there
    /// is a bias and a residual z, from the problem's [`Epilogue`](crate::conv::Epilogue);
    /// the filter plain or prepared beforehand ([`Handle::prepare_weights`]); the workspace
    /// the caller's (`Some`) or the handle's (`None`, within its budget).
    ///
    /// # Errors
    /// As [`Handle::conv_forward_with_workspace`]; [`Error::BadParam`] when the epilogue's
    /// values do not match the problem's epilogue, or prepared weights were made for another
    /// problem or algorithm.
    #[allow(clippy::too_many_arguments)]
    pub fn conv_forward_ex(
        &self,
        problem: &ConvProblem,
        algo: &str,
        x: &[f32],
        w: Weights<'_>,
        y: &mut [f32],
        epilogue: &EpilogueArgs<'_>,
        workspace: Option<&mut [u8]>,
    ) -> Result<()> {
        let inputs = ConvFwdInputs {
            x: Tensor::F32(x),
            w,
            epilogue: *epilogue,
        };
        self.run_algorithm::<ConvForward>(problem, algo, &inputs, &mut TensorMut::F32(y), workspace)
    }

    /// Transforms the filter once for `algo` on `problem` (see
    /// [`ConvAlgorithm::prepare`](crate::conv::ConvAlgorithm::prepare)); algorithms with
    /// nothing to prepare keep a copy of the plain filter. Pass the result as
    /// [`Weights::Prepared`] to [`Handle::conv_forward_ex`].
    ///
    /// # Errors
    /// As [`Handle::conv_forward`] for the filter; allocation failures.
    pub fn prepare_weights(
        &self,
        problem: &ConvProblem,
        algo: &str,
        w: &[f32],
    ) -> Result<PreparedWeights> {
        let a = find_in::<ConvForward>(ConvForward::algorithms(), algo)?;
        check_call(problem, problem.x().span(), w.len(), problem.y().span())?;
        accept::<ConvForward>(a, problem)?;
        crate::op::prepared::prepare_for(a, &self.exec_context(), problem, w)
    }

    /// Bytes of workspace the handle keeps cached between calls.
    pub fn cached_workspace_bytes(&self) -> usize {
        self.shared.workspace.cached_bytes()
    }
}

/// Algorithm selection: settings, the tuning cache, the cost model, and the selecting calls.
impl Handle {
    /// The selection policy.
    pub fn policy(&self) -> Policy {
        self.config().settings.policy
    }
    /// Sets the selection policy.
    pub fn set_policy(&self, policy: Policy) {
        self.update_settings(|s| s.policy = policy);
    }
    /// True when only deterministic algorithms are selected.
    pub fn deterministic(&self) -> bool {
        self.config().settings.deterministic
    }
    /// Selects only algorithms whose output bits do not depend on thread scheduling.
    pub fn set_deterministic(&self, on: bool) {
        self.update_settings(|s| s.deterministic = on);
    }
    /// True when selection is for calls with prepared weights (see
    /// [`Handle::set_prepared_selection`]).
    pub fn prepared_selection(&self) -> bool {
        self.config().settings.prepared
    }
    /// Selects for calls with prepared weights (an inference deployment that prepares the
    /// chosen algorithm's weights once, [`Handle::prepare_weights`]): the race and exhaustive
    /// timing run each candidate on its own prepared weights, made outside the timing (its
    /// preparation's milliseconds and bytes are reported beside, [`crate::select::AlgoPerf`]),
    /// the cost model predicts calls without the filter's packing or transform, and the
    /// tuning cache keeps these rankings apart from those of plain calls. Off by default:
    /// plain calls transform the filter every time, and the winner can differ (a Winograd or
    /// FFT filter transform is a large part of a small layer's call).
    pub fn set_prepared_selection(&self, on: bool) {
        self.update_settings(|s| s.prepared = on);
    }
    /// Most candidates a `benchmark` race times (the best-predicted ones).
    pub fn max_timed(&self) -> usize {
        self.config().settings.max_timed
    }
    /// Sets the most candidates a race times (at least 1).
    pub fn set_max_timed(&self, n: usize) {
        self.update_settings(|s| s.max_timed = n.max(1));
    }
    /// The fault-injection setting (from `AUTODNN_FAIL_ALLOC` when the handle was made).
    pub fn fail_alloc(&self) -> FailAlloc {
        self.config().settings.fail_alloc.clone()
    }
    /// Makes workspace reservations fail on purpose, to rehearse low-memory deployments.
    pub fn set_fail_alloc(&self, f: FailAlloc) {
        self.update_settings(|s| s.fail_alloc = f);
    }
    /// The algorithm forced wherever it accepts the problem (from `AUTODNN_ALGO`).
    pub fn forced_algo(&self) -> Option<String> {
        self.config().settings.forced.clone()
    }
    /// Forces an algorithm wherever it accepts the problem (and fits the budget); `None`
    /// selects by policy.
    pub fn set_forced_algo(&self, name: Option<&str>) {
        let name = name.map(str::to_string);
        self.update_settings(|s| s.forced = name);
    }
    /// True when decisions are printed on stderr (`AUTODNN_LOG=dispatch`).
    pub fn log_dispatch(&self) -> bool {
        self.config().settings.log
    }
    /// Prints (or stops printing) each decision on stderr.
    pub fn set_log_dispatch(&self, on: bool) {
        self.update_settings(|s| s.log = on);
    }

    /// What predictions and cache keys depend on besides the problem.
    pub fn machine(&self) -> Machine {
        Machine {
            cpu: select::cache::cpu_model(),
            isa: self.isa(),
            threads: self.pool.threads(),
        }
    }

    /// The cost model: the one set with [`Handle::set_cost_model`]; else the file beside the
    /// tuning cache (`cost_model.json`, written by `autodnn calibrate`) when there is one;
    /// else the shipped defaults.
    pub fn cost_model(&self) -> Arc<CostModel> {
        if let Some(m) = read(&self.shared.cost_model).as_ref() {
            return m.clone();
        }
        let path = match read(&self.shared.cache_path).as_ref() {
            Some(p) => select::heuristic::cost_model_path_beside(p),
            None => select::heuristic::default_cost_model_path(),
        };
        let model = if path.exists() {
            CostModel::load(&path).unwrap_or_else(|e| {
                eprintln!("autodnn: warning: {e}; using the shipped cost model");
                CostModel::shipped()
            })
        } else {
            CostModel::shipped()
        };
        let model = Arc::new(model);
        *write(&self.shared.cost_model) = Some(model.clone());
        model
    }

    /// Sets the cost model the heuristic uses.
    pub fn set_cost_model(&self, model: CostModel) {
        *write(&self.shared.cost_model) = Some(Arc::new(model));
    }

    /// A copy of the in-memory tuning cache.
    pub fn tuning_cache(&self) -> TuningCache {
        read(&self.shared.cache).clone()
    }
    /// Replaces the in-memory tuning cache.
    pub fn set_tuning_cache(&self, cache: TuningCache) {
        *write(&self.shared.cache) = cache;
    }
    /// The file [`Handle::save_tuning_cache`] writes: the one last loaded, else `None`.
    pub fn tuning_cache_path(&self) -> Option<PathBuf> {
        read(&self.shared.cache_path).clone()
    }

    /// Loads the tuning cache from `path` for a run that will save it (see
    /// [`TuningCache::load`]: a missing file is an empty cache; a file that is not a tuning
    /// cache is read as empty with a warning, left as it is, and set aside as `FILE.bak` by the
    /// next [`Handle::save_tuning_cache`]) and remembers the path for
    /// [`Handle::save_tuning_cache`]; the cost model is looked for beside it.
    ///
    /// # Errors
    /// [`Error::BadParam`] (`cache.path`) when the file's folder does not exist;
    /// [`Error::Io`] when the file exists but cannot be read.
    pub fn load_tuning_cache(&self, path: &Path) -> Result<()> {
        self.install_cache(path, TuningCache::load(path)?);
        Ok(())
    }

    /// Loads the tuning cache from `path` for a run that only reads it (see
    /// [`TuningCache::load_read_only`]): nothing is created, locked or renamed, and a file that
    /// is not a tuning cache is an error. Remembers the path as
    /// [`Handle::load_tuning_cache`] does.
    ///
    /// # Errors
    /// [`Error::BadParam`] (`cache.path`) when the file's folder does not exist,
    /// [`Error::BadParam`] (`cache.file`) when the file is not a tuning cache,
    /// [`Error::Io`] when it cannot be read.
    pub fn load_tuning_cache_read_only(&self, path: &Path) -> Result<()> {
        self.install_cache(path, TuningCache::load_read_only(path)?);
        Ok(())
    }

    fn install_cache(&self, path: &Path, loaded: TuningCache) {
        *write(&self.shared.cache) = loaded;
        *write(&self.shared.cache_path) = Some(path.to_path_buf());
        *write(&self.shared.cost_model) = None;
    }

    /// Writes the tuning cache to the path it was loaded from (else
    /// [`crate::default_cache_path`]), merging with what other processes wrote meanwhile.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn save_tuning_cache(&self) -> Result<PathBuf> {
        let path = self
            .tuning_cache_path()
            .unwrap_or_else(crate::default_cache_path);
        write(&self.shared.cache).save(&path)?;
        Ok(path)
    }

    /// What selection works with for one call.
    pub(crate) fn env(&self) -> Env<'_> {
        let c = self.config();
        Env {
            ctx: self.exec_context(),
            settings: c.settings.clone(),
            limit: c.workspace_limit,
            workspace: &self.shared.workspace,
            cache: &self.shared.cache,
            model: self.cost_model(),
            machine: self.machine(),
        }
    }

    /// Keeps every worker thread busy for a moment so that timings that follow see the cores
    /// at full speed (see [`select::benchmark::wake_cores`]).
    pub fn wake_cores(&self) {
        select::benchmark::wake_cores(&self.exec_context());
    }
}

/// The generic surface: the verbs of every operation (cuDNN's Get, Find, GetWorkspaceSize and
/// run), over the operation's registry or over a list the caller gives (`*_among`: a subset of
/// the registry, or algorithms of the caller's own).
impl Handle {
    /// Workspace bytes the algorithm `algo` of operation `O` needs for `problem`.
    ///
    /// # Errors
    /// [`Error::UnknownAlgorithm`]; [`Error::Declined`] when it does not accept the problem.
    pub fn workspace_size<O: Registered>(&self, problem: &O::Problem, algo: &str) -> Result<usize> {
        let a = find_in::<O>(O::algorithms(), algo)?;
        accept::<O>(a, problem)?;
        Ok(a.workspace_bytes(problem))
    }

    /// The heuristic ranking of `problem` among `O`'s registered algorithms (cuDNN's `Get`):
    /// every algorithm that accepts it, fastest predicted first, with its workspace, without
    /// running anything. Algorithms over the workspace budget, or not deterministic when the
    /// handle asks for determinism, are listed with `eligible: false`.
    ///
    /// # Errors
    /// None today; the `Result` leaves room for backends whose queries can fail.
    pub fn get<O: Registered>(&self, problem: &O::Problem) -> Result<Vec<Ranked>> {
        self.get_among::<O>(O::algorithms(), problem)
    }

    /// [`Handle::get`] among `algos`.
    ///
    /// # Errors
    /// As [`Handle::get`].
    pub fn get_among<O: Operation>(
        &self,
        algos: &[&O::Algo<'_>],
        problem: &O::Problem,
    ) -> Result<Vec<Ranked>> {
        Ok(select::rank::<O>(&self.env(), algos, problem).0)
    }

    /// Measured selection (cuDNN's `Find`): times the eligible algorithms on `problem` with
    /// `inputs` (into a scratch output), racing them (every one to the end under
    /// [`Policy::Exhaustive`]), stores the ranking in the tuning cache and returns the
    /// records, fastest first.
    ///
    /// # Errors
    /// Bad inputs; [`Error::Declined`] when no algorithm is eligible.
    pub fn find<O: Registered>(
        &self,
        problem: &O::Problem,
        inputs: &O::Inputs<'_>,
    ) -> Result<Vec<AlgoPerf>> {
        self.find_among::<O>(O::algorithms(), problem, inputs)
    }

    /// [`Handle::find`] among `algos`.
    ///
    /// # Errors
    /// As [`Handle::find`].
    pub fn find_among<O: Operation>(
        &self,
        algos: &[&O::Algo<'_>],
        problem: &O::Problem,
        inputs: &O::Inputs<'_>,
    ) -> Result<Vec<AlgoPerf>> {
        let inputs = O::check_call(problem, inputs, None)?;
        let env = self.env();
        let plan = select::plan::<O>(&env, algos, problem, Some(&inputs), Mode::Find)?;
        Ok(plan.records)
    }

    /// Selects by the handle's policy (see [`Policy`]) and returns the plan: the chain of
    /// algorithms to try, where the choice came from and what selecting cost. `inputs` are
    /// what the candidates are timed on when the policy times.
    ///
    /// # Errors
    /// Bad inputs; [`Error::UnknownAlgorithm`] when a forced algorithm is not registered;
    /// [`Error::Declined`] when no algorithm is eligible.
    pub fn plan<O: Registered>(
        &self,
        problem: &O::Problem,
        inputs: &O::Inputs<'_>,
    ) -> Result<Plan<O>> {
        self.plan_among::<O>(O::algorithms(), problem, inputs)
    }

    /// [`Handle::plan`] among `algos`.
    ///
    /// # Errors
    /// As [`Handle::plan`].
    pub fn plan_among<O: Operation>(
        &self,
        algos: &[&O::Algo<'_>],
        problem: &O::Problem,
        inputs: &O::Inputs<'_>,
    ) -> Result<Plan<O>> {
        let inputs = O::check_call(problem, inputs, None)?;
        let env = self.env();
        select::plan::<O>(&env, algos, problem, Some(&inputs), Mode::Policy)
    }

    /// Runs a plan with the fallback chain (see [`crate::select`]): the output computed by the
    /// first algorithm of the chain that succeeds, in the caller's workspace (`Some`:
    /// algorithms needing more are stepped past, each with a fallback event) or the handle's
    /// (`None`, within its budget).
    ///
    /// # Errors
    /// Bad input at once ([`crate::ErrorKind::BadInput`]); [`Error::AllFailed`] when every
    /// algorithm of the chain failed.
    pub fn run_plan<O: Registered>(
        &self,
        plan: &Plan<O>,
        inputs: &O::Inputs<'_>,
        out: &mut O::Output<'_>,
        workspace: Option<&mut [u8]>,
    ) -> Result<RunReport> {
        self.run_plan_among::<O>(O::algorithms(), plan, inputs, out, workspace)
    }

    /// [`Handle::run_plan`] among `algos` (the plan's chain names them).
    ///
    /// # Errors
    /// As [`Handle::run_plan`].
    pub fn run_plan_among<O: Operation>(
        &self,
        algos: &[&O::Algo<'_>],
        plan: &Plan<O>,
        inputs: &O::Inputs<'_>,
        out: &mut O::Output<'_>,
        workspace: Option<&mut [u8]>,
    ) -> Result<RunReport> {
        select::execute::<O>(&self.env(), algos, plan, inputs, out, workspace)
    }

    /// Selects by the handle's policy and runs with the fallback chain; the report says which
    /// algorithm ran, where the choice came from, what selecting cost and every fallback.
    ///
    /// # Errors
    /// As [`Handle::plan`] and [`Handle::run_plan`].
    pub fn run<O: Registered>(
        &self,
        problem: &O::Problem,
        inputs: &O::Inputs<'_>,
        out: &mut O::Output<'_>,
    ) -> Result<RunReport> {
        self.run_among::<O>(O::algorithms(), problem, inputs, out)
    }

    /// [`Handle::run`] among `algos`.
    ///
    /// # Errors
    /// As [`Handle::run`].
    pub fn run_among<O: Operation>(
        &self,
        algos: &[&O::Algo<'_>],
        problem: &O::Problem,
        inputs: &O::Inputs<'_>,
        out: &mut O::Output<'_>,
    ) -> Result<RunReport> {
        let plan = self.plan_among::<O>(algos, problem, inputs)?;
        let mut report = self.run_plan_among::<O>(algos, &plan, inputs, out, None)?;
        report.selection_ms = plan.selection_ms;
        Ok(report)
    }

    /// Runs the algorithm named `algo` of operation `O` on one call, in the caller's
    /// workspace (`Some`) or the handle's (`None`, within its budget).
    ///
    /// # Errors
    /// Bad inputs, [`Error::UnknownAlgorithm`], [`Error::Declined`],
    /// [`Error::WorkspaceTooSmall`], [`Error::OutOfMemory`], or the algorithm's failure.
    pub fn run_algorithm<O: Registered>(
        &self,
        problem: &O::Problem,
        algo: &str,
        inputs: &O::Inputs<'_>,
        out: &mut O::Output<'_>,
        workspace: Option<&mut [u8]>,
    ) -> Result<()> {
        let a = find_in::<O>(O::algorithms(), algo)?;
        let inputs = O::check_call(problem, inputs, Some(O::output_len(out)))?;
        accept::<O>(a, problem)?;
        let needed = a.workspace_bytes(problem);
        let ctx = self.exec_context();
        match workspace {
            Some(ws) => {
                if ws.len() < needed {
                    return Err(Error::WorkspaceTooSmall {
                        algo: a.name().into(),
                        needed,
                        got: ws.len(),
                    });
                }
                a.run(&ctx, problem, &inputs, out, ws)
            }
            None => {
                // A direct call needs the budget and the pool only, not the whole `Env`
                // (cost model, machine description) that selection takes.
                let c = self.config();
                let mut ws = self.shared.workspace.reserve(
                    needed,
                    a.name(),
                    c.workspace_limit,
                    &c.settings.fail_alloc,
                )?;
                a.run(&ctx, problem, &inputs, out, ws.slice())
            }
        }
    }
}

/// The forward convolution's conveniences: the generic verbs for [`ConvForward`] with f32
/// slices.
impl Handle {
    /// The heuristic ranking (cuDNN's `Get`) of a forward problem: [`Handle::get`] for
    /// [`ConvForward`].
    ///
    /// # Errors
    /// As [`Handle::get`].
    pub fn get_conv_algorithms(&self, problem: &ConvProblem) -> Result<Vec<Ranked>> {
        self.get::<ConvForward>(problem)
    }

    /// Measured selection (cuDNN's `Find`) of a forward problem on `x` and `w`:
    /// [`Handle::find`] for [`ConvForward`].
    ///
    /// # Errors
    /// As [`Handle::conv_forward`] for the buffers and epilogue values; [`Error::Declined`]
    /// when no algorithm is eligible.
    pub fn find_conv_algorithms(
        &self,
        problem: &ConvProblem,
        x: &[f32],
        w: &[f32],
        epilogue: &EpilogueArgs<'_>,
    ) -> Result<Vec<AlgoPerf>> {
        let inputs = ConvFwdInputs::new(x, Weights::Plain(w), *epilogue);
        self.find::<ConvForward>(problem, &inputs)
    }

    /// Selects by the handle's policy (see [`Policy`]) and returns the plan:
    /// [`Handle::plan`] for [`ConvForward`].
    ///
    /// # Errors
    /// As [`Handle::conv_forward_ex`] for the buffers and epilogue values;
    /// [`Error::UnknownAlgorithm`] when a forced algorithm is not registered;
    /// [`Error::Declined`] when no algorithm is eligible.
    pub fn plan_conv(
        &self,
        problem: &ConvProblem,
        x: &[f32],
        w: &[f32],
        epilogue: &EpilogueArgs<'_>,
    ) -> Result<ConvPlan> {
        let inputs = ConvFwdInputs::new(x, Weights::Plain(w), *epilogue);
        self.plan::<ConvForward>(problem, &inputs)
    }

    /// Selects an algorithm for calls with prepared weights (as
    /// [`Handle::set_prepared_selection`] does, whatever the handle's setting) under the
    /// handle's policy, and prepares `w` for it: tune and prepare once, then pass the weights
    /// as [`Weights::Prepared`] to every call.
    ///
    /// ```
    /// use autodnn::{Handle, Layout, ProblemSpec};
    /// use autodnn::conv::{EpilogueArgs, Weights};
    /// let p = ProblemSpec::parse("mb1ic8ih10oc8kh3ph1")?.to_problem(Layout::Nchw)?;
    /// let h = Handle::with_threads(1)?;
    /// let (x, w) = (vec![1.0f32; p.x().span()], vec![1.0f32; p.w().elements()]);
    /// let (pw, plan) = h.prepare_weights_auto(&p, &x, &w, &EpilogueArgs::default())?;
    /// assert_eq!(pw.algo(), plan.algo());
    /// let mut y = vec![0.0f32; p.y().span()];
    /// let r = h.conv_forward_auto(&p, &x, Weights::Prepared(&pw), &mut y, &EpilogueArgs::default())?;
    /// assert_eq!((r.algo, y[0], y[55]), (plan.algo(), 32.0, 72.0)); // a corner, the interior
    /// # Ok::<(), autodnn::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Handle::plan_conv`] and [`Handle::prepare_weights`].
    pub fn prepare_weights_auto(
        &self,
        problem: &ConvProblem,
        x: &[f32],
        w: &[f32],
        epilogue: &EpilogueArgs<'_>,
    ) -> Result<(PreparedWeights, ConvPlan)> {
        let inputs = ConvFwdInputs::new(x, Weights::Plain(w), *epilogue);
        let inputs = ConvForward::check_call(problem, &inputs, None)?;
        let mut env = self.env();
        if !env.settings.prepared {
            let mut s = (*env.settings).clone();
            s.prepared = true;
            env.settings = Arc::new(s);
        }
        let algos = ConvForward::algorithms();
        let plan = select::plan::<ConvForward>(&env, algos, problem, Some(&inputs), Mode::Policy)?;
        let pw = self.prepare_weights(problem, plan.algo(), w)?;
        Ok((pw, plan))
    }

    /// Tunes `problem` for calls with prepared weights ([`Handle::prepare_weights_auto`]) and
    /// returns the deployable plan: the choice, the ranking and the prepared filter, made
    /// under this handle's instruction set, to save with
    /// [`DeployedPlan::to_bytes`](crate::select::deploy::DeployedPlan::to_bytes).
    ///
    /// ```
    /// use autodnn::{Handle, Layout, ProblemSpec};
    /// use autodnn::conv::EpilogueArgs;
    /// let p = ProblemSpec::parse("mb1ic8ih10oc8kh3ph1")?.to_problem(Layout::Nchw)?;
    /// let h = Handle::with_threads(1)?;
    /// let (x, w) = (vec![1.0f32; p.x().span()], vec![1.0f32; p.w().elements()]);
    /// let bytes = h.deploy_conv(&p, &x, &w, &EpilogueArgs::default())?.to_bytes()?;
    /// // Later, elsewhere: no timing, no transformation.
    /// let plan = h.load_plan(&bytes, &p, None)?;
    /// let mut y = vec![0.0f32; p.y().span()];
    /// h.conv_forward_deployed(&plan, &x, &mut y, &EpilogueArgs::default())?;
    /// assert_eq!(y[55], 72.0);
    /// # Ok::<(), autodnn::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Handle::prepare_weights_auto`].
    pub fn deploy_conv(
        &self,
        problem: &ConvProblem,
        x: &[f32],
        w: &[f32],
        epilogue: &EpilogueArgs<'_>,
    ) -> Result<DeployedPlan> {
        let (weights, plan) = self.prepare_weights_auto(problem, x, w, epilogue)?;
        Ok(DeployedPlan {
            plan,
            weights,
            isa: self.isa(),
        })
    }

    /// The deployable plan of `algo` on `problem` (a forced choice): its prepared weights, the
    /// chain `algo` alone.
    ///
    /// # Errors
    /// As [`Handle::prepare_weights`].
    pub fn deploy_conv_with(
        &self,
        problem: &ConvProblem,
        algo: &str,
        w: &[f32],
    ) -> Result<DeployedPlan> {
        let weights = self.prepare_weights(problem, algo, w)?;
        Ok(DeployedPlan {
            plan: Plan::single(problem, weights.algo(), Source::Forced),
            weights,
            isa: self.isa(),
        })
    }

    /// Loads a plan for `problem` from bytes
    /// ([`DeployedPlan::from_bytes`](crate::select::deploy::DeployedPlan::from_bytes) checks
    /// them). One made under this handle's instruction set runs as saved; one made under
    /// another is prepared again from `plain` (the dispatch log says so), or refused naming
    /// `plan.isa` without it.
    ///
    /// # Errors
    /// As `DeployedPlan::from_bytes`; [`Error::BadParam`] naming `plan.isa`; as
    /// [`Handle::prepare_weights`] when preparing again.
    pub fn load_plan(
        &self,
        bytes: &[u8],
        problem: &ConvProblem,
        plain: Option<&[f32]>,
    ) -> Result<DeployedPlan> {
        let mut d = DeployedPlan::from_bytes(bytes, problem)?;
        if d.isa != self.isa() {
            let Some(w) = plain else {
                return Err(Error::bad(
                    "plan.isa",
                    d.isa.name(),
                    format!(
                        "prepared under {} and this handle runs {}: give the plain filter to \
                         prepare it again",
                        d.isa.name(),
                        self.isa().name()
                    ),
                ));
            };
            d.weights = self.prepare_weights(problem, d.weights.algo(), w)?;
            if self.log_dispatch() {
                select::log_lines(&[format!(
                    "plan for {} prepared under {}, loaded under {}: prepared again for {}",
                    crate::op::OpProblem::describe(problem),
                    d.isa.name(),
                    self.isa().name(),
                    d.weights.algo()
                )]);
            }
            d.isa = self.isa();
        }
        Ok(d)
    }

    /// Readies the handle to run `plans` with nothing allocated on their first calls: its
    /// workspace grows to the largest one the plans' algorithms need, and the GEMM engine's
    /// packing buffers on this thread and the handle's workers to their largest blocks, their
    /// pages written now (an engine's loader calls this once after [`Handle::load_plan`], so that
    /// the first inference does not pay for fresh memory). Returns the workspace's bytes.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when that workspace is over the handle's budget or cannot be
    /// allocated; as [`Handle::conv_workspace_size`].
    ///
    /// ```
    /// # use autodnn::{Handle, Layout, ProblemSpec};
    /// let h = Handle::with_threads(1)?;
    /// let p = ProblemSpec::parse("mb1ic8ih12oc8kh3ph2dh1")?.to_problem(Layout::Nchw)?;
    /// let w = vec![1.0; p.w().elements()];
    /// let plan = h.deploy_conv_with(&p, "kn2row", &w)?;
    /// let bytes = h.warm_up_plans(&[&plan])?;
    /// assert_eq!(bytes, h.conv_workspace_size(&p, "kn2row")?);
    /// assert!(h.cached_workspace_bytes() >= bytes);
    /// # Ok::<(), autodnn::Error>(())
    /// ```
    pub fn warm_up_plans(&self, plans: &[&DeployedPlan]) -> Result<usize> {
        let mut most = 0;
        for d in plans {
            most = most.max(self.conv_workspace_size(d.plan.problem(), d.weights.algo())?);
        }
        let c = self.config();
        // Reserved and given back: the pool keeps it, its bytes written once as it grew.
        self.shared.workspace.reserve(
            most,
            "the plans",
            c.workspace_limit,
            &c.settings.fail_alloc,
        )?;
        crate::gemm::warm_packing_buffers(&self.exec_context())?;
        Ok(most)
    }

    /// Runs a deployed plan: its algorithm on its prepared weights, nothing timed or
    /// transformed.
    ///
    /// # Errors
    /// As [`Handle::conv_forward_ex`].
    pub fn conv_forward_deployed(
        &self,
        plan: &DeployedPlan,
        x: &[f32],
        y: &mut [f32],
        epilogue: &EpilogueArgs<'_>,
    ) -> Result<()> {
        let w = &plan.weights;
        self.conv_forward_ex(
            plan.plan.problem(),
            w.algo(),
            x,
            Weights::Prepared(w),
            y,
            epilogue,
            None,
        )
    }

    /// Runs a plan with the fallback chain: [`Handle::run_plan`] for [`ConvForward`].
    ///
    /// # Errors
    /// Bad input at once ([`crate::ErrorKind::BadInput`]); [`Error::AllFailed`] when every
    /// algorithm of the chain failed.
    pub fn conv_forward_plan(
        &self,
        plan: &ConvPlan,
        x: &[f32],
        w: Weights<'_>,
        y: &mut [f32],
        epilogue: &EpilogueArgs<'_>,
        workspace: Option<&mut [u8]>,
    ) -> Result<RunReport> {
        let inputs = ConvFwdInputs::new(x, w, *epilogue);
        self.run_plan::<ConvForward>(plan, &inputs, &mut TensorMut::F32(y), workspace)
    }

    /// y = act(alpha · conv(x, w) + bias + beta · z) with an algorithm chosen by the handle's
    /// policy, run with the fallback chain ([`Handle::run`] for [`ConvForward`]). Prepared
    /// weights pin the algorithm they were made for (or, when they hold the plain filter,
    /// select as usual).
    ///
    /// # Errors
    /// As [`Handle::plan_conv`] and [`Handle::conv_forward_plan`].
    pub fn conv_forward_auto(
        &self,
        problem: &ConvProblem,
        x: &[f32],
        w: Weights<'_>,
        y: &mut [f32],
        epilogue: &EpilogueArgs<'_>,
    ) -> Result<RunReport> {
        self.conv_forward_auto_among(ConvForward::algorithms(), problem, x, w, y, epilogue)
    }

    /// [`Handle::conv_forward_auto`] among `algos`.
    ///
    /// # Errors
    /// As [`Handle::conv_forward_auto`].
    pub fn conv_forward_auto_among(
        &self,
        algos: &[&<ConvForward as Operation>::Algo<'_>],
        problem: &ConvProblem,
        x: &[f32],
        w: Weights<'_>,
        y: &mut [f32],
        epilogue: &EpilogueArgs<'_>,
    ) -> Result<RunReport> {
        let plain = match w {
            Weights::Plain(w) | Weights::Tensor(Tensor::F32(w)) => w,
            Weights::Tensor(_) => {
                let inputs = ConvFwdInputs {
                    x: Tensor::F32(x),
                    w,
                    epilogue: *epilogue,
                };
                return self.run_among::<ConvForward>(
                    algos,
                    problem,
                    &inputs,
                    &mut TensorMut::F32(y),
                );
            }
            Weights::Prepared(pw) => {
                if *pw.problem() != problem.as_f32().with_epilogue(Default::default()) {
                    return Err(Error::bad(
                        "prepared.problem",
                        "a different problem",
                        "these weights were prepared for another problem",
                    ));
                }
                match pw.plain() {
                    Some(data) => data,
                    None => {
                        // Transformed weights only suit the algorithm that made them.
                        let a = find_in::<ConvForward>(algos, pw.algo())?;
                        let plan = ConvPlan::single(problem, a.name(), Source::Prepared);
                        let inputs = ConvFwdInputs::new(x, w, *epilogue);
                        return self.run_plan_among::<ConvForward>(
                            algos,
                            &plan,
                            &inputs,
                            &mut TensorMut::F32(y),
                            None,
                        );
                    }
                }
            }
        };
        let inputs = ConvFwdInputs::new(x, Weights::Plain(plain), *epilogue);
        self.run_among::<ConvForward>(algos, problem, &inputs, &mut TensorMut::F32(y))
    }
}

fn find_in<'a, O: Operation>(algos: &[&'a O::Algo<'a>], name: &str) -> Result<&'a O::Algo<'a>> {
    algos
        .iter()
        .copied()
        .find(|a| a.name() == name)
        .ok_or_else(|| Error::UnknownAlgorithm {
            name: name.into(),
            known: algos
                .iter()
                .map(|a| a.name())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

fn accept<O: Operation>(a: &O::Algo<'_>, problem: &O::Problem) -> Result<()> {
    a.check(problem).map_err(|reason| Error::Declined {
        algo: a.name().into(),
        reason,
    })
}
