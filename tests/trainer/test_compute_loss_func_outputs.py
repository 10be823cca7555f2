"""``make_compute_loss_func`` reads the logits from every output form, and names what is missing otherwise."""

from __future__ import annotations

import pytest
import torch
from transformers.modeling_outputs import BaseModelOutput, CausalLMOutput

from hf_lmobj.trainer.compute_loss import make_compute_loss_func

LABELS = torch.tensor([[0, 1, 1]])
LOGITS = torch.zeros(1, 3, 2)


@pytest.mark.parametrize(
    "outputs",
    [{"logits": LOGITS}, CausalLMOutput(logits=LOGITS), (LOGITS,), [LOGITS]],
    ids=["dict", "output", "tuple", "list"],
)
def test_the_logits_are_read_from_every_output_form(outputs):
    assert make_compute_loss_func("causal")(outputs, LABELS).item() == pytest.approx(0.693147, abs=1e-6)


@pytest.mark.parametrize(
    "outputs", [{"last_hidden_state": LOGITS}, BaseModelOutput(last_hidden_state=LOGITS)], ids=["dict", "base"]
)
def test_outputs_without_logits_name_the_keys_and_the_fix(outputs):
    with pytest.raises(ValueError, match=r"last_hidden_state.*no logits.*ForCausalLM"):
        make_compute_loss_func("causal")(outputs, LABELS)


@pytest.mark.parametrize("outputs", [None, (), ("logits",), 3.0], ids=["none", "empty", "str", "float"])
def test_outputs_that_hold_no_tensor_are_a_type_error(outputs):
    with pytest.raises(TypeError, match="model outputs with logits"):
        make_compute_loss_func("masked")(outputs, LABELS)
