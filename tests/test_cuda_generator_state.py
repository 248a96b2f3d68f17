"""A CUDA generator's state is an object generators share (aten/src/ATen/cuda/CUDAGeneratorImpl.cpp: `state_`, a
CUDAGeneratorState): `clone_state()` returns a new generator over a copy of it, `graphsafe_get_state()` a new
generator over the state itself, and `graphsafe_set_state(g)` makes a generator use g's state. Megatron-Core's
CUDA-graph-safe RNG tracker (core_v0.16.1 tensor_parallel/random.py CudaRNGStatesTracker(use_cudagraphable_rng=
True)) swaps the default generator's state so, and checks first that a CUDA build has them
(`hasattr(torch.cuda.CUDAGraph, "register_generator_state")`). simdist's clone_state gave a CPU generator (device
ops with it drew another stream) and the graph-safe calls raised the CPU generator's NotImplementedError."""
import torch

import simdist
from simdist.errors import UnsupportedOperation


def _draws():
    d = torch.cuda.default_generators[0]
    d.manual_seed(11)
    c = d.clone_state()  # a copy: draws through c leave d alone
    a = torch.randn(4, device="cuda")
    b = torch.randn(4, device="cuda", generator=c)
    shared = d.graphsafe_get_state()  # the state itself
    x = torch.randn(4, device="cuda")
    y = torch.randn(4, device="cuda", generator=shared)  # continues after x
    z = torch.randn(4, device="cuda")  # continues after y
    d.manual_seed(11)
    replay = [torch.randn(4, device="cuda") for _ in range(4)]
    return [t.tolist() for t in (a, b, x, y, z)], [t.tolist() for t in replay], c.device, shared.device


def test_clone_state_copies_and_graphsafe_get_state_shares():
    (a, b, x, y, z), replay, cdev, sdev = simdist.run(_draws).returns[0]
    assert a == b == replay[0]
    assert (x, y, z) == (replay[1], replay[2], replay[3])
    assert cdev == sdev == torch.device("cuda", 0)


def _tracker_swap():
    d = torch.cuda.default_generators[0]
    d.manual_seed(5)
    states = {"tp": d.clone_state()}
    states["tp"].manual_seed(123)
    out = []
    for _ in range(2):  # Megatron's fork(): swap the state in, draw, keep the advanced state, swap back
        orig = d.graphsafe_get_state()
        d.graphsafe_set_state(states["tp"])
        out.append(torch.randn(3, device="cuda").tolist())
        states["tp"] = d.graphsafe_get_state()
        d.graphsafe_set_state(orig)
    after = torch.randn(3, device="cuda").tolist()
    torch.cuda.manual_seed(123)
    want = [torch.randn(3, device="cuda").tolist() for _ in range(2)]
    torch.cuda.manual_seed(5)
    return out, want, after, torch.randn(3, device="cuda").tolist()


def test_a_swapped_in_state_advances_and_the_default_state_is_untouched():
    out, want, after, default_first = simdist.run(_tracker_swap).returns[0]
    assert out == want
    assert after == default_first


def _megatron_tracker():
    from megatron.core.tensor_parallel.random import CudaRNGStatesTracker
    t = CudaRNGStatesTracker(use_cudagraphable_rng=True)
    t.add("model-parallel-rng", 77)
    with t.fork("model-parallel-rng"):
        a = torch.randn(5, device="cuda").tolist()
    plain = CudaRNGStatesTracker(use_cudagraphable_rng=False)
    plain.add("model-parallel-rng", 77)
    with plain.fork("model-parallel-rng"):
        b = torch.randn(5, device="cuda").tolist()
    return a, b


def test_megatron_graph_safe_tracker_draws_as_its_plain_tracker():
    import pytest
    pytest.importorskip("megatron.core")
    a, b = simdist.run(_megatron_tracker).returns[0]
    assert a == b


def _graph():
    has = hasattr(torch.cuda.CUDAGraph, "register_generator_state")
    try:
        torch.cuda.CUDAGraph()
    except UnsupportedOperation as e:
        return has, str(e)


def test_cuda_graph_methods_exist_and_capture_is_refused_by_name():
    has, err = simdist.run(_graph).returns[0]
    assert has and "CUDA graphs" in err


def _set_data_held_by_cxx():
    class F(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.data = torch.ones(4, device="cuda")  # Megatron's CheckpointFunction with distribute_saved_activations
            return x * 2

    F.apply(torch.zeros(4))


def test_moving_a_host_tensor_that_cxx_holds_is_refused_by_name():
    # A GPU's set_data changes the one tensor every C++ holder shares; simdist swaps Python objects, which C++
    # holders (here the Function's unpacked input) would not follow: a named refusal, not swap_tensors' error.
    import pytest
    with pytest.raises(UnsupportedOperation, match="C\\+\\+ holds"):
        simdist.run(_set_data_held_by_cxx)


def _set_data_of_a_saved_leaf():
    x = torch.ones(3, device="cuda", requires_grad=True)
    w = torch.tensor(2.)  # a leaf without requires_grad: mul saves it, the save is its second C++ reference
    y = (x * w).sum()
    w.data = torch.tensor(3., device="cuda")
    y.backward()


def test_a_saved_leaf_without_requires_grad_is_not_swapped():
    # torch.utils.swap_tensors allows a second reference only when it is the leaf's AccumulateGrad node; a saved
    # tensor's would keep the old value (x.grad 2 where set_data gives 3: a silent wrong gradient before)
    import pytest
    with pytest.raises(UnsupportedOperation, match="C\\+\\+ holds 2"):
        simdist.run(_set_data_of_a_saved_leaf)


def _old_graph_after_a_move():
    p = torch.nn.Parameter(torch.ones(3))
    y = (p * 2).sum()  # a graph made before the move: its AccumulateGrad holds the host tensor
    p.data = p.data.cuda()
    y.backward()


def test_a_graph_made_before_a_move_cannot_put_its_gradient_on_the_other_object():
    import pytest
    with pytest.raises(Exception, match="graph made before simdist moved it"):
        simdist.run(_old_graph_after_a_move)


def test_the_philox_offset_api_saves_and_restores_a_device_generator():
    """torch.cuda._get_rng_state_offset / _set_rng_state_offset and Generator.get_offset / set_offset of a CUDA
    generator (aten/src/ATen/cuda/CUDAGeneratorImpl.cpp: Philox offsets are multiples of 4, "offset must be a
    multiple of 4"; functionalized RNG and checkpointing save and restore it): setting a saved offset back draws
    the same values again; an offset not a multiple of 4 is refused as CUDA refuses it; get_rng_state carries the
    same offset. simdist's device generators are CPU generators underneath and raised "CPU Generator does not use
    offset"."""
    def prog():
        torch.cuda.manual_seed(0)
        a = torch.cuda._get_rng_state_offset()
        x = torch.randn(8, device="cuda")
        b = torch.cuda._get_rng_state_offset()
        state_offset = torch.cuda.get_rng_state()[8:16].view(torch.int64).item()
        torch.cuda._set_rng_state_offset(a)
        y = torch.randn(8, device="cuda")
        g = torch.Generator("cuda")
        g.set_offset(8)
        try:
            g.set_offset(5)
            bad = None
        except RuntimeError as e:
            bad = str(e)
        return a, b, state_offset, torch.equal(x, y), g.get_offset(), bad

    a, b, state_offset, same, off, bad = simdist.run(prog).returns[0]
    assert (a, b, state_offset, same, off) == (0, 4, 4, True, 8)
    assert bad == "offset must be a multiple of 4"
