"""R2D2's value rescaling: h and h^-1 invert each other, and h squashes as its formula says."""

import numpy as np
import pytest

from shoal.agents.components.value_rescaling import rescale, unrescale


@pytest.mark.parametrize("x", [0.0, 1e-6, -0.5, 1.0, 3.0, -42.0, 1e3, -1e5])
def test_h_inverse_undoes_h_and_h_undoes_h_inverse(x):
    assert float(unrescale(rescale(np.float32(x)))) == pytest.approx(x, rel=1e-4, abs=1e-4)
    assert float(rescale(unrescale(np.float32(x)))) == pytest.approx(x, rel=1e-4, abs=1e-4)


def test_h_by_hand():
    assert float(rescale(np.float32(3.0))) == pytest.approx(1.0 + 3e-3)  # sqrt(4) - 1 + eps * 3
    assert float(rescale(np.float32(-8.0))) == pytest.approx(-2.0 - 8e-3)  # -(sqrt(9) - 1) + eps * -8
    assert float(rescale(np.float32(0.0))) == 0.0
    xs = np.linspace(-100, 100, 2001, dtype=np.float32)
    assert np.all(np.diff(np.asarray(rescale(xs))) > 0)  # strictly increasing: invertible
