"""The hunt's matrix entries that follow from first principles (the rest is whatever the simulation says)."""
import pytest

from simdist.properties import hunt

CFG = [dict(tp=tp, pp=pp, recipe=r, fp8_param=f) for tp, pp in ((1, 1), (2, 1), (2, 2)) for r in hunt.RECIPES
       for f in (False, True)]


@pytest.mark.parametrize("cfg", CFG, ids=lambda c: f"tp{c['tp']}pp{c['pp']}-{c['recipe']}-fp8{int(c['fp8_param'])}")
def test_faithful_stack_is_clean(cfg):
    cell = hunt.run_cell((cfg, "faithful", 1))
    assert cell.symbol == ".", cell


@pytest.mark.parametrize("fault", ["dequant_side_stream", "no_record_stream", "pp_broadcast_dequantized_temp"])
@pytest.mark.parametrize("tp,pp", [(2, 1), (2, 2)])
def test_dequantize_faults_are_clean_with_fp8_param_off(fault, tp, pp):
    for recipe in hunt.RECIPES:
        cell = hunt.run_cell((dict(tp=tp, pp=pp, recipe=recipe, fp8_param=False), fault, 1))
        assert cell.symbol == ".", cell


@pytest.mark.parametrize("fault", ["dequant_side_stream", "no_record_stream"])
def test_blockwise_only_faults_are_clean_for_per_tensor(fault):
    for tp, pp in ((1, 1), (2, 1), (2, 2)):
        cell = hunt.run_cell((dict(tp=tp, pp=pp, recipe="per-tensor", fp8_param=True), fault, 1))
        assert cell.symbol == ".", cell


def test_a_fault_is_detected_and_damages():
    cell = hunt.run_cell((dict(tp=2, pp=1, recipe="blockwise-fp32", fp8_param=True), "dequant_side_stream", 2))
    assert cell.hazard and cell.damage


def test_verdicts_and_explanation_follow_the_cells():
    cells = [hunt.Cell(c, cand, hazard=dmg, nan_metric=dmg)
             for cand in ("faithful", "x_fits", "x_too_broad")
             for c in hunt.incident_configs()
             for dmg in [(cand == "x_fits" and hunt.reported_damage(c)) or (cand == "x_too_broad" and c["tp"] >= 2)]]
    v = hunt.verdicts(cells)
    assert v["x_fits"]["fits"] and not v["x_too_broad"]["fits"] and not v["faithful"]["fits"]
    text = hunt.explain(v)
    assert "x_fits" in text and "x_too_broad does not fit" in text
