"""The ranges of numbers mschecker reads from users (flags, campaign specs), in one place: every number read has a
range, and the flags and the campaign spec must agree on it."""

#: ULP distances are counted in int64 over the ordered bit patterns; fp64's whole range spans < 2**64, so no
#: meaningful --ulp exceeds 2**62 and a larger one would overflow the comparison's int64 arithmetic.
ULP_MAX = 2**62
#: Integer flags that size work or memory (--topk, --examples) stay below this; larger asks are typos.
COUNT_MAX = 10**6
