"""Replays the Python functional API's fuzz corpus (fuzz/corpus/python_functional, committed
seeds) and pinned findings (fuzz/regressions/python_functional) through the harness
(fuzz/python/functional.py): each input must keep the harness's invariants (results match
the f64 reference, errors are autodnn.Error subclasses naming one of the call's arguments).
Needs no atheris. A missing or empty seed folder fails."""

import importlib.util
import pathlib

import numpy as np
import pytest

import autodnn

ROOT = pathlib.Path(__file__).resolve().parents[2]
HARNESS = ROOT / "fuzz" / "python" / "functional.py"
CORPUS = ROOT / "fuzz" / "corpus" / "python_functional"
REGRESSIONS = ROOT / "fuzz" / "regressions" / "python_functional"


def _harness():
    spec = importlib.util.spec_from_file_location("autodnn_fuzz_functional", HARNESS)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def harness():
    # The harness makes a 1-thread heuristic handle the default: restore the caller's after.
    prev = autodnn._api._default
    try:
        yield _harness()
    finally:
        autodnn.set_default_handle(prev)


def _files(folder):
    return sorted(p for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []


def test_corpus_is_present():
    assert CORPUS.is_dir(), f"missing seed corpus {CORPUS}"
    assert len(_files(CORPUS)) >= 20, f"seed corpus {CORPUS} has under 20 inputs"


def test_corpus_replays(harness):
    files = _files(CORPUS) + _files(REGRESSIONS)
    assert files, "no inputs to replay"
    for f in files:
        try:
            harness.one_input(f.read_bytes())
        except AssertionError as e:
            raise AssertionError(f"{f.relative_to(ROOT)}: {e}") from e


def _regression(harness, name):
    path = REGRESSIONS / name
    assert path.is_file(), f"missing pinned input {path}"
    harness.one_input(path.read_bytes())


# Findings of the campaigns, each pinned by its input (replayed through the harness) and by a
# direct check of the fixed behaviour.


def test_handle_cache_surrogate_no_panic(harness):
    # PyO3's path extraction panicked (PanicException) on a str the file system encoding
    # cannot encode.
    _regression(harness, "handle_cache_surrogate")
    with pytest.raises(autodnn.InvalidArgumentError) as e:
        autodnn.Handle(cache="\ud800")
    assert e.value.argument == "cache"


def test_handle_arguments_of_wrong_type(harness):
    # threads beyond i64 raised OverflowError, a non-str policy TypeError.
    _regression(harness, "handle_threads_huge")
    _regression(harness, "handle_policy_not_str")
    for kw, arg in [({"threads": 2**70}, "threads"), ({"threads": "2"}, "threads"),
                    ({"policy": 3}, "policy"), ({"workspace_limit": 1.5}, "workspace_limit"),
                    ({"deterministic": (1,)}, "deterministic")]:
        with pytest.raises(autodnn.InvalidArgumentError) as e:
            autodnn.Handle(**kw)
        assert e.value.argument == arg
    h = autodnn.Handle(threads=1, policy="heuristic")
    for attr, v in [("policy", 3), ("workspace_limit", "x"), ("deterministic", np.zeros(2))]:
        with pytest.raises(autodnn.InvalidArgumentError) as e:
            setattr(h, attr, v)
        assert e.value.argument == attr


def test_misaligned_inputs_are_copied(harness):
    # A misaligned C-contiguous view was refused ("unusable strides"): ascontiguousarray
    # returns it as it is, so the copy is now a real one.
    _regression(harness, "misaligned_input_conv2d")
    _regression(harness, "misaligned_input_gemm")
    buf = np.zeros(4 * 2 * 3 + 1, np.uint8)
    a = buf[1:].view(np.float32).reshape(2, 3)
    a[...] = [[1, 2, 3], [4, 5, 6]]
    b = np.eye(3, dtype=np.float32)
    h = autodnn.Handle(threads=1, policy="heuristic")
    np.testing.assert_array_equal(autodnn.gemm(a, b, handle=h), a)


def test_strided_bias_read_packed(harness):
    # A bias view of element stride over 1 was read as if packed (a wrong result).
    _regression(harness, "strided_bias_conv2d")
    h = autodnn.Handle(threads=1, policy="heuristic")
    x = np.ones((1, 1, 2, 2), np.float32)
    w = np.ones((3, 1, 1, 1), np.float32)
    b = np.arange(6, dtype=np.float32)[::2]  # 0, 2, 4
    y = autodnn.conv2d(x, w, b, algo="direct", handle=h)
    np.testing.assert_array_equal(y[0, :, 0, 0], [1, 3, 5])


def test_backward_errors_name_the_call_arguments(harness):
    # Errors of backward data named x (conv2d's argument) rather than x_shape, or raised
    # TypeError for a junk x_shape; errors of backward weight named w rather than w_shape.
    _regression(harness, "backward_data_names_x_shape")
    _regression(harness, "backward_weight_names_w_shape")
    h = autodnn.Handle(threads=1, policy="heuristic")
    dy = np.ones((1, 2, 3, 3), np.float32)
    w = np.ones((2, 1, 3, 3), np.float32)
    with pytest.raises(autodnn.InvalidArgumentError) as e:
        autodnn.conv2d_backward_data(dy, w, (1, 1, 2, 2), handle=h)  # under the 3x3 kernel
    assert e.value.argument == "x_shape"
    with pytest.raises(autodnn.InvalidArgumentError) as e:
        autodnn.conv2d_backward_data(dy, w, ("1", 1, 5, 5), handle=h)
    assert e.value.argument == "x_shape"
    with pytest.raises(autodnn.InvalidArgumentError) as e:
        autodnn.conv2d_backward_weight(np.ones((1, 1, 5, 5), np.float32), dy, (2, 3, 3, 3),
                                       handle=h)
    assert e.value.argument == "w_shape"


@pytest.mark.parametrize("name,call,arg", [
    ("alpha_not_a_number", lambda h, x, w: autodnn.conv2d(x, w, alpha="1", handle=h), "alpha"),
    ("stride_array_truth_value",
     lambda h, x, w: autodnn.conv2d(x, w, stride=np.array([1, 1]), handle=h), "stride"),
    ("padding_huge_int", lambda h, x, w: autodnn.conv2d(x, w, padding=2**64, handle=h),
     "padding"),
    ("algo_surrogate", lambda h, x, w: autodnn.conv2d(x, w, algo="\ud800", handle=h), "algo"),
    ("activation_not_str", lambda h, x, w: autodnn.conv2d(x, w, activation=3, handle=h),
     "activation"),
    ("handle_not_a_handle", lambda h, x, w: autodnn.conv2d(x, w, handle=3), "handle"),
    ("trans_a_array",
     lambda h, x, w: autodnn.gemm(x[0, 0], x[0, 0], trans_a=np.zeros(2), handle=h), "trans_a"),
])
def test_junk_arguments_raise_invalid_argument(harness, name, call, arg):
    # Each raised TypeError, OverflowError, UnicodeEncodeError or NumPy's ambiguous-truth
    # ValueError instead of an InvalidArgumentError naming the argument.
    _regression(harness, name)
    h = autodnn.Handle(threads=1, policy="heuristic")
    x = np.ones((1, 1, 3, 3), np.float32)
    w = np.ones((1, 1, 1, 1), np.float32)
    with pytest.raises(autodnn.InvalidArgumentError) as e:
        call(h, x, w)
    assert e.value.argument == arg


def test_prepared_weights_on_degenerate_layouts(harness):
    # With C = 1 (or K = 1) a packed NHWC array also fits NCHW strides; the array was
    # described as NCHW while the shape it was prepared on is NHWC, so conv2d refused the
    # prepared weights as "another problem".
    _regression(harness, "prepared_nhwc_degenerate")
    _regression(harness, "prepared_nhwc_out_k1")
    h = autodnn.Handle(threads=1, policy="heuristic")
    x = np.arange(2 * 5 * 5, dtype=np.float32).reshape(2, 5, 5, 1) % 5
    w = np.ones((1, 1, 3, 3), np.float32)
    pw = autodnn.prepare_weights(w, x.shape, padding=1, handle=h, layout="nhwc")
    out = np.zeros((2, 5, 5, 1), np.float32)
    y = autodnn.conv2d(x, pw, padding=1, out=out, handle=h, layout="nhwc")
    ref = autodnn.conv2d(x, w, padding=1, algo="direct", handle=h, layout="nhwc")
    np.testing.assert_allclose(y, ref, atol=1e-4)


def test_nested_lists_are_arrays(harness):
    # A nested list was taken for a shape by get_algorithms and for a 3-D operand by
    # gemm_strided_batched.
    _regression(harness, "get_algorithms_nested_list")
    _regression(harness, "batched_gemm_nested_list")
    h = autodnn.Handle(threads=1, policy="heuristic")
    x = np.ones((1, 2, 4, 4), np.float32)
    w = np.ones((3, 2, 3, 3), np.float32)
    assert autodnn.get_algorithms(x.tolist(), w, handle=h)
    a = np.ones((2, 3, 4), np.float32)
    b = np.eye(4, dtype=np.float32)
    np.testing.assert_array_equal(autodnn.gemm_strided_batched(a, b.tolist(), handle=h), a)


def test_prepared_weights_refuse_out_of_another_layout(harness):
    # The campaign's false alarm, pinned as documented behaviour: weights prepared on a
    # channels-last input are for a channels-last output; out= packed NCHW is another problem,
    # refused with an error naming w (the harness no longer expects success there).
    _regression(harness, "prepared_out_other_layout")
    h = autodnn.Handle(threads=1, policy="heuristic")
    x = np.ascontiguousarray(np.ones((1, 2, 3, 3), np.float32).transpose(0, 2, 3, 1))
    x = x.transpose(0, 3, 1, 2)  # channels-last strides, NCHW shape
    w = np.ones((4, 2, 1, 1), np.float32)
    pw = autodnn.prepare_weights(w, x, algo="direct", handle=h)
    with pytest.raises(autodnn.InvalidArgumentError) as e:
        autodnn.conv2d(x, pw, out=np.zeros((1, 4, 3, 3), np.float32), algo="direct", handle=h)
    assert e.value.argument == "w"


def test_named_algorithm_over_the_workspace_limit(harness):
    # The campaign's false alarm, pinned as documented behaviour: an algorithm named by the
    # caller that needs more workspace than the handle's limit is an OutOfMemoryError (the
    # handle's own choice falls back to one that fits).
    _regression(harness, "named_algo_over_workspace_limit")
    h = autodnn.Handle(threads=1, policy="heuristic", workspace_limit=0)
    x = np.ones((1, 2, 6, 6), np.float32)
    dy = np.ones((1, 3, 4, 4), np.float32)
    with pytest.raises(autodnn.OutOfMemoryError):
        autodnn.conv2d_backward_weight(x, dy, (3, 2, 3, 3), algo="gemm", handle=h)
    dw = autodnn.conv2d_backward_weight(x, dy, (3, 2, 3, 3), handle=h)
    np.testing.assert_array_equal(dw, np.full((3, 2, 3, 3), 16, np.float32))


def test_residual_copied_in_the_layout_of_out(harness):
    # With layout="nhwc" and out= packed NCHW, a residual in another layout was copied into an
    # NHWC buffer and read as if NCHW (a wrong result).
    _regression(harness, "residual_copy_in_out_layout")
    h = autodnn.Handle(threads=1, policy="heuristic")
    x = (np.arange(1 * 3 * 4 * 2, dtype=np.float32).reshape(1, 3, 4, 2) % 5) - 2  # NHWC
    w = np.ones((4, 2, 1, 1), np.float32)
    z = (np.arange(1 * 3 * 4 * 4, dtype=np.float32).reshape(1, 3, 4, 4) % 7) - 3  # NHWC
    out = np.zeros((1, 4, 3, 4), np.float32).transpose(0, 2, 3, 1)  # NCHW memory, NHWC view
    y = autodnn.conv2d(x, w, residual=z, beta=1.0, out=out, algo="direct", handle=h,
                       layout="nhwc")
    ref = x.sum(axis=3, keepdims=True) + z
    np.testing.assert_array_equal(y, ref)


def test_activation_compared_at_the_scale_before_it(harness):
    # The campaign's false alarm: large unsigned inputs through sigmoid, compared at the scale
    # of the activation's output (1) rather than of the values before it, whose rounding it
    # carries. The harness now scales by the latter (and keeps unsigned data in [0, 4]).
    _regression(harness, "sigmoid_tolerance_large_inputs")
