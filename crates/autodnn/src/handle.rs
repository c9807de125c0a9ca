//! The handle: worker threads, instruction-set cap, workspace budget and (later) the tuning
//! cache, as cuDNN's `cudnnHandle_t` holds a device context and stream.

use std::sync::Arc;

use crate::conv::{
    self, AlgoWeights, ConvAlgorithm, EpilogueArgs, ExecContext, PreparedWeights, Weights,
};
use crate::cpu::Isa;
use crate::desc::{ConvProblem, DataType};
use crate::error::{Error, Result};

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
#[derive(Debug, Clone)]
pub struct Handle {
    threads: usize,
    pool: Arc<rayon::ThreadPool>,
    isa: Isa,
    workspace_limit: Option<usize>,
    backend: Backend,
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

    /// A CPU handle with `threads` worker threads. The instruction set is the widest this
    /// machine has, capped by `AUTODNN_ISA` when set.
    ///
    /// # Errors
    /// [`Error::BadParam`] for 0 threads or a bad `AUTODNN_ISA`; [`Error::OutOfMemory`] when
    /// the threads cannot be started.
    pub fn with_threads(threads: usize) -> Result<Handle> {
        if threads == 0 {
            return Err(Error::bad("threads", 0, "must be at least 1"));
        }
        if threads > 4096 {
            return Err(Error::bad("threads", threads, "must be at most 4096"));
        }
        let isa = Isa::from_env()?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("autodnn-{i}"))
            .build()
            .map_err(|e| Error::OutOfMemory {
                bytes: 0,
                what: format!("starting {threads} worker threads: {e}"),
            })?;
        Ok(Handle {
            threads,
            pool: Arc::new(pool),
            isa,
            workspace_limit: None,
            backend: Backend::Cpu,
        })
    }

    /// Worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }
    /// The backend this handle runs on.
    pub fn backend(&self) -> Backend {
        self.backend
    }
    /// The widest instruction set kernels may use.
    pub fn isa(&self) -> Isa {
        self.isa
    }
    /// Caps the instruction set (the effective one is the narrower of `cap` and what the
    /// machine has).
    pub fn set_isa_cap(&mut self, cap: Isa) {
        self.isa = cap.min(Isa::best_available());
    }
    /// Most workspace bytes one call may allocate; `None` means no limit.
    pub fn workspace_limit(&self) -> Option<usize> {
        self.workspace_limit
    }
    /// Sets the workspace budget.
    pub fn set_workspace_limit(&mut self, bytes: Option<usize>) {
        self.workspace_limit = bytes;
    }

    pub(crate) fn exec_context(&self) -> ExecContext<'_> {
        ExecContext {
            pool: &self.pool,
            threads: self.threads,
            isa: self.isa,
        }
    }

    /// Workspace bytes `algo` needs for `problem`.
    ///
    /// # Errors
    /// [`Error::UnknownAlgorithm`], or [`Error::Declined`] when the algorithm does not accept
    /// the problem.
    pub fn conv_workspace_size(&self, problem: &ConvProblem, algo: &str) -> Result<usize> {
        let a = conv::find(algo)?;
        accept(a, problem)?;
        Ok(a.workspace_bytes(problem))
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
        let a = conv::find(algo)?;
        let w_len = match w {
            Weights::Plain(w) => w.len(),
            Weights::Prepared(_) => problem.w().elements(),
        };
        check_call(problem, x.len(), w_len, y.len())?;
        let epi = epilogue.checked(problem.epilogue(), problem.w().k(), problem.y().span())?;
        let weights = match w {
            Weights::Plain(w) => AlgoWeights::Plain(w),
            Weights::Prepared(pw) => pw.for_call(problem, a.name())?,
        };
        accept(a, problem)?;
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
                a.run(&ctx, problem, x, weights, y, ws, &epi)
            }
            None => {
                let mut ws = self.allocate_workspace(needed, a.name())?;
                a.run(&ctx, problem, x, weights, y, &mut ws, &epi)
            }
        }
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
        let a = conv::find(algo)?;
        check_call(problem, problem.x().span(), w.len(), problem.y().span())?;
        accept(a, problem)?;
        let ctx = self.exec_context();
        Ok(match a.prepare(&ctx, problem, w)? {
            Some(data) => PreparedWeights::new(a.name(), problem, data, true),
            None => {
                let mut data = Vec::new();
                let n = problem.w().elements();
                data.try_reserve_exact(n).map_err(|e| Error::OutOfMemory {
                    bytes: n.saturating_mul(4),
                    what: format!("a copy of the filter: {e}"),
                })?;
                data.extend_from_slice(&w[..n]);
                PreparedWeights::new(a.name(), problem, data, false)
            }
        })
    }

    fn allocate_workspace(&self, bytes: usize, what: &str) -> Result<Vec<u8>> {
        if let Some(limit) = self.workspace_limit {
            if bytes > limit {
                return Err(Error::OutOfMemory {
                    bytes,
                    what: format!("{what}'s workspace: over the handle's budget of {limit} bytes"),
                });
            }
        }
        let mut v = Vec::new();
        v.try_reserve_exact(bytes).map_err(|e| Error::OutOfMemory {
            bytes,
            what: format!("{what}'s workspace: {e}"),
        })?;
        v.resize(bytes, 0);
        Ok(v)
    }
}

fn accept(a: &dyn ConvAlgorithm, problem: &ConvProblem) -> Result<()> {
    a.check(problem).map_err(|reason| Error::Declined {
        algo: a.name().into(),
        reason,
    })
}

/// Checks that apply to every algorithm: element type and buffer lengths.
pub(crate) fn check_call(problem: &ConvProblem, x: usize, w: usize, y: usize) -> Result<()> {
    let dt = problem.x().dtype();
    if dt != DataType::F32 {
        return Err(Error::Unsupported {
            what: format!("{} convolution (only f32 has kernels)", dt.name()),
        });
    }
    for (field, needed, got) in [
        ("x", problem.x().span(), x),
        ("w", problem.w().elements(), w),
        ("y", problem.y().span(), y),
    ] {
        if got < needed {
            return Err(Error::BufferTooSmall {
                field: field.into(),
                needed,
                got,
            });
        }
    }
    Ok(())
}
