"""Tolerances shared by the tests that compare two runs' losses."""

from __future__ import annotations

# bf16 keeps 8 bits of mantissa: the same bf16 computation in two processes agrees to rounding of the cut
# (the cut leaves the bottom in fp32 on both paths); losses over a 1-epoch run stay within 1e-3 relative
BF16_LOSS_RTOL = 1e-3
