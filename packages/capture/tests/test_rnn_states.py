"""`torch.lstm`'s final states keep the initial states' shape through capture (torch 2.11's decomposition gave
(layers, 1, batch, hidden); the integration suite's `tests/test_rnn.py` runs on that torch in CI's lowest session)."""

from __future__ import annotations

import torch
from ember_capture._rnn import LstmStateShapes, states_as_initial


def lstm_args():
    params = [torch.randn(16, 5), torch.randn(16, 4), torch.randn(16), torch.randn(16)] * 2
    return torch.randn(7, 3, 5), (torch.randn(2, 3, 4), torch.randn(2, 3, 4)), params, True, 2, 0.0, False, False, False


def test_states_in_another_shape_take_the_initial_states_shape_and_keep_their_values():
    x, hx, *rest = lstm_args()
    out, h, c = torch.lstm(x, hx, *rest)
    for wrong in [(out, h.unsqueeze(1), c.unsqueeze(1)), (out, h.view(2, 12), c.view(2, 12))]:  # 2.11's shapes
        fixed = states_as_initial(wrong, hx)
        assert [tuple(t.shape) for t in fixed] == [(7, 3, 4), (2, 3, 4), (2, 3, 4)]
        torch.testing.assert_close(fixed[1], h, rtol=0, atol=0)
        torch.testing.assert_close(fixed[2], c, rtol=0, atol=0)


def test_states_of_another_size_are_left_alone_and_the_mode_passes_the_right_shapes_through():
    x, hx, *rest = lstm_args()
    out, h, c = torch.lstm(x, hx, *rest)
    assert states_as_initial((out, h[:1], c), hx)[1].shape == (1, 3, 4)
    with LstmStateShapes():
        got = torch.lstm(x, hx, *rest)
    for g, w in zip(got, (out, h, c)):
        torch.testing.assert_close(g, w)
