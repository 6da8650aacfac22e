"""ember's own float32 erf over 8 or 16 lanes: within 0.76 ulp of the exact result for every float32 (checked
exhaustively over [0, 4.5); eager's Sleef erf is a 1-ulp function, libmvec's 2 ulp with 8 lanes and 4 with 16),
and 2.3x as fast as libmvec's on an AMD Zen 5 with AVX-512 (`benchmarks/vector_math.py`). GELU computes it, forward
and backward.

[0, 4) is cut into 16 intervals of width 1/4; above, erf rounds to 1. On interval i >= 1, erf(x) = b_i + t q_i(t)
with t = |x| - c_i, where c_i is a float32 near the interval's middle whose erf b_i is a float32 within 1e-4 ulp,
so that the sum needs no low part: one fma rounds it. t is exact (c_i is within a factor of 2 of every x of its
interval). On interval 0 the base is t = |x| itself, erf(t) = t + t q_0(t), so that tiny arguments keep their
relative accuracy. Each q_i has degree 5; the 16 entries of each table sit in one 16-lane register (two 8-lane
ones), and a lane picks its interval's entry with one permute (`vpermps`/`vpermt2ps`), not a gather. The tables
come from `tools/fit_erf.py` (weighted minimax in ulps of the result, coefficients rounded to float32 one by one).

8 and 16 lanes use the same tables and steps, so a value has the same bits at either width and in a scalar tail
(`ember_s_erff`, lane 0 of the vector function).
"""

from __future__ import annotations

CENTERS = (0.0, 0.3775457441806793, 0.6251201629638672, 0.8754698038101196, 1.1260889768600464, 1.376109004020691,
           1.6262767314910889, 1.8720359802246094, 2.1270627975463867, 2.370445489883423, 2.6450605392456055,
           2.8703136444091797, 3.1196060180664062, 3.3819644451141357, 3.623706579208374, 3.832519054412842)
BASES = (0.0, 0.40661025047302246, 0.6233326196670532, 0.7843214869499207, 0.8887344002723694, 0.9483587145805359,
         0.9785462617874146, 0.9918900728225708, 0.9973713159561157, 0.9991986155509949, 0.9998164772987366,
         0.9999507665634155, 0.9999897480010986, 0.9999982714653015, 0.9999997019767761, 0.9999999403953552)
COEFFICIENTS = (
    (0.12837916612625122, 0.9784764647483826, 0.7633848786354065, 0.5243136882781982, 0.3174947202205658,
     0.16984079778194427, 0.0801389068365097, 0.03392047435045242, 0.012233050540089607, 0.004094013012945652,
     0.001032716128975153, 0.0002981488360092044, 6.69771179673262e-05, 1.2165563020971604e-05,
     2.236793534393655e-06, 4.714654266990692e-07),
    (-4.60393266621395e-07, -0.3694196045398712, -0.4772072732448578, -0.45902079343795776, -0.3575272858142853,
     -0.23371945321559906, -0.13032804429531097, -0.06350035220384598, -0.026020463556051254, -0.009704633615911007,
     -0.0027316021732985973, -0.0008557782857678831, -0.00020893670443911105, -4.1138708184007555e-05,
     -8.101676939986646e-06, -1.8012252667176654e-06),
    (-0.37609657645225525, -0.2331780046224594, -0.055595483630895615, 0.09313151985406876, 0.162567600607872,
     0.15780270099639893, 0.11458832025527954, 0.06794381886720657, 0.03282071650028229, 0.01397155411541462,
     0.004472519736737013, 0.0015380957629531622, 0.0004122013342566788, 8.870167948771268e-05,
     1.8834143702406436e-05, 4.444684691407019e-06),
    (-0.0005842169048264623, 0.16715030372142792, 0.17644399404525757, 0.11223877966403961, 0.027640508487820625,
     -0.030669547617435455, -0.04973222687840462, -0.042428143322467804, -0.02623308077454567,
     -0.013324843719601631, -0.005003067664802074, -0.0019226324511691928, -0.0005741639179177582,
     -0.00013690601917915046, -3.205457323929295e-05, -8.679473467054777e-06),
    (0.11775467544794083, 0.04468018561601639, -0.026772070676088333, -0.06677639484405518, -0.06075774133205414,
     -0.030517594888806343, -0.0022132317535579205, 0.011271018534898758, 0.012427237816154957,
     0.008443135768175125, 0.003965627867728472, 0.0017590997740626335, 0.000596824858803302,
     0.00015964799968060106, 4.041100692120381e-05, 1.4472509974439163e-05),
    (-0.01873907819390297, -0.04958335682749748, -0.04122719541192055, -0.010372954420745373, 0.015484197996556759,
     0.022056207060813904, 0.014353289268910885, 0.004158726427704096, -0.001773156807757914,
     -0.0030903241131454706, -0.002243742812424898, -0.0011423722608014941, -0.0004298420390114188,
     -0.00012269818398635834, -1.4004275726620108e-05, -8.930132935347501e-06),
)

# lanes at which kernels call ember's erf (a permute of 16 entries needs one or two registers)
LANES = (8, 16)


def _table(values: tuple[float, ...], lanes: int) -> str:
    parts = [values[k: k + lanes] for k in range(0, len(values), lanes)]
    return "{" + ", ".join("{" + ", ".join(f"{v!r}f" for v in part) + "}" for part in parts) + "}"


def vector_erf(lanes: int) -> str:
    """`ember_verf` (float32) and its 16-entry table lookup at `lanes` (8 or 16), in the vector layer's C++."""
    assert lanes in LANES, lanes
    vt, it, parts = f"ember_f32x{lanes}", f"ember_i32x{lanes}", 16 // lanes
    shuffle = "__builtin_shuffle(t[0], i)" if parts == 1 else "__builtin_shuffle(t[0], t[1], i)"
    tables = [("c", CENTERS), ("b", BASES)] + [(f"q{k + 1}", row) for k, row in enumerate(COEFFICIENTS)]
    lines = [
        "#if defined(__has_builtin) && !defined(__clang__)",
        "#if __has_builtin(__builtin_shuffle)",
        "#define EMBER_PERMUTE 1",
        "#endif",
        "#endif",
        "// entry i[l] (0..15) of a 16-entry table in lane l: a permute where the compiler has __builtin_shuffle",
        f"EMBER_INLINE {vt} ember_vlookup16(const {vt} (&t)[{parts}], {it} i) {{",
        "#ifdef EMBER_PERMUTE",
        f"  return {shuffle};",
        "#else",
        f"  {vt} r; for (int l = 0; l < {lanes}; ++l) r[l] = t[i[l] / {lanes}][i[l] % {lanes}]; return r;",
        "#endif",
        "}",
        f"EMBER_INLINE {vt} ember_verf({vt} a) {{  // ember's own: `_erf.py`",
        *(f"  static const {vt} {name}[{parts}] = {_table(values, lanes)};" for name, values in tables),
        f"  const {vt} x = ember_vabs(a), zero = {{}};",
        f"  const {it} i = __builtin_convertvector(x < 4.0f ? x * 4.0f : zero, {it});  // NaN and x >= 4: 0",
        f"  const {vt} t = x - ember_vlookup16(c, i);",
        f"  {vt} q = ember_vlookup16(q{len(COEFFICIENTS)}, i);",
        *(f"  q = ember_vfma(q, t, ember_vlookup16(q{k}, i));" for k in range(len(COEFFICIENTS) - 1, 0, -1)),
        f"  const {vt} r = ember_vfma(q, t, i == 0 ? t : ember_vlookup16(b, i));",
        "  return ember_vcopysign(x >= 4.0f ? zero + 1.0f : r, a);",
        "}",
    ]
    return "\n".join(lines)
