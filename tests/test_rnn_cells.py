"""Recurrent layers on simulated CUDA: ATen hands the gates of nn.LSTM / nn.GRU / nn.LSTMCell / nn.GRUCell on CUDA
tensors to fused CUDA kernels (aten/src/ATen/native/RNN.cpp LSTMCell/GRUCell: `_thnn_fused_lstm_cell`,
`_thnn_fused_gru_cell`, and their backwards through derivatives.yaml), which a CPU build has no kernel for: every
recurrent layer raised NotImplementedError. simdist/faces/rules/rnn_cells.py computes them as
aten/src/ATen/native/cuda/RNN.cu does; values equal eager CPU's up to rounding (the CPU cell adds the biases inside
`linear`, the CUDA kernel inside the cell)."""
import pytest
import torch
import torch.nn as nn

import simdist
from simdist.faces import guard

needs_guard = pytest.mark.skipif(not guard.load(warn=False), reason=guard.reason() or "no fake CUDA guard")


def _modules():
    torch.manual_seed(0)
    return nn.ModuleDict({"lstm": nn.LSTM(8, 16, num_layers=2), "gru": nn.GRU(8, 16, bidirectional=True),
                          "lstm_cell": nn.LSTMCell(8, 16), "gru_cell": nn.GRUCell(8, 16, bias=False)})


def _step(m, x):
    o1, (h, c) = m["lstm"](x)
    o2, h2 = m["gru"](x)
    hc, cc = m["lstm_cell"](x[0])
    hg = m["gru_cell"](x[0], hg0 := torch.ones_like(x[0][:, :1]).expand(-1, 16).contiguous())
    # only hy of the first LSTM layer's last step reaches the loss through `h`: grad_cy undefined there
    loss = o1.pow(2).sum() + c.sum() + o2.sum() + h2.sum() + hc.sum() + cc.pow(2).sum() + (hg * hg0).pow(2).sum()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in m.parameters()]


@needs_guard
def test_lstm_and_gru_layers_and_cells_forward_backward_match_eager_cpu():
    """Rule: the fused cells compute the LSTM / GRU equations (torch.nn.LSTM / GRU docs) and their gradients, so
    losses and every parameter's gradient agree with eager CPU up to float32 rounding, with no hazard (one stream)."""
    x = torch.randn(5, 3, 8, generator=torch.Generator().manual_seed(1))
    ref_loss, ref_grads = _step(_modules(), x)

    def fn():
        loss, grads = _step(_modules().cuda(), x.cuda())
        return loss.cpu(), [g.cpu() for g in grads]
    res = simdist.run(fn)
    assert not res.hazards, res.report()
    loss, grads = res.returns[0]
    assert torch.allclose(loss, ref_loss, rtol=1e-5, atol=1e-5)
    assert len(grads) == len(ref_grads)
    for g, r in zip(grads, ref_grads):
        assert torch.allclose(g, r, rtol=1e-4, atol=1e-5), (g - r).abs().max()


@needs_guard
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_precision_cells_accumulate_in_float32(dtype):
    """Rule (aten/src/ATen/native/cuda/RNN.cu: the cells compute in accscalar_t, float32 for half and bfloat16, and
    store in the tensor's dtype): a bf16/fp16 LSTM runs, its outputs keep the dtype and stay close to the float32
    layer's."""
    x = torch.randn(4, 2, 8, generator=torch.Generator().manual_seed(2))

    def fn():
        torch.manual_seed(0)
        m = nn.LSTM(8, 16).cuda()
        ref = m(x.cuda())[0]
        out = m.to(dtype)(x.cuda().to(dtype))[0]
        out.float().sum().backward()
        return out.dtype, (out.float() - ref).abs().max().item(), m.weight_hh_l0.grad.dtype
    res = simdist.run(fn)
    assert not res.hazards, res.report()
    got_dtype, err, grad_dtype = res.returns[0]
    assert got_dtype == dtype and grad_dtype == dtype
    assert err < 0.05


@needs_guard
def test_a_cell_is_one_kernel_on_the_current_stream():
    """Rule: like any CUDA op, the fused cell runs on the current stream: state written on a side stream and read
    by the cell without a wait is a race; after wait_stream it is clean."""
    def prog(wait):
        def fn():
            cell = nn.GRUCell(8, 16).cuda()
            x = torch.randn(4, 8).cuda()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                hx = torch.full((4, 16), 0.5, device="cuda")
            if wait:
                torch.cuda.current_stream().wait_stream(side)
            return cell(x, hx).sum().item()
        return fn
    assert any(h.kind == "read-after-write" for h in simdist.run(prog(False)).hazards)
    assert not simdist.run(prog(True)).hazards


@needs_guard
def test_cell_kernel_contracts_as_rnn_cu():
    """Rule (aten/src/ATen/native/cuda/RNN.cu): the GRU workspace is [r, z, n, hx, hn + b_hn]; the LSTM backward
    with neither grad_hy nor grad_cy defined returns three undefined tensors."""
    aten = torch.ops.aten

    def fn():
        ig = torch.zeros(2, 9, device="cuda")
        hg = torch.zeros(2, 9, device="cuda")
        hx = torch.full((2, 3), 7.0, device="cuda")
        hb = torch.arange(9.0, device="cuda")
        hy, ws = aten._thnn_fused_gru_cell(ig, hg, hx, None, hb)
        cx = torch.zeros(2, 3, device="cuda")
        _, cy, lws = aten._thnn_fused_lstm_cell(torch.zeros(2, 12, device="cuda"), torch.zeros(2, 12, device="cuda"), cx)
        grads = aten._thnn_fused_lstm_cell_backward_impl(None, None, cx, cy, lws, True)
        return ws[:, 9:12].cpu(), ws[:, 12:15].cpu(), [g is None for g in grads]
    res = simdist.run(fn)
    hx_slot, hn_slot, undefined = res.returns[0]
    assert torch.equal(hx_slot, torch.full((2, 3), 7.0))
    assert torch.equal(hn_slot, torch.tensor([6.0, 7.0, 8.0]).expand(2, 3))
    assert undefined == [True, True, True]
