"""ember's own float32 erf and tanh over 8 or 16 lanes, each within one ulp of the exact result for every float32
(checked exhaustively by `tools/fit_vector_math.py --check`: erf 0.76 ulp at worst, tanh 0.77), as accurate as
eager's (Sleef's 1-ulp functions) and faster than what kernels called before on an AMD Zen 5 with AVX-512
(`benchmarks/vector_math.py`). GELU computes erf, forward and backward; GPT-2's GELU computes tanh.

Both cut [0, 16 w) into 16 intervals of width w (erf: 1/4, tanh: 1/8). On interval i >= 1, f(x) = b_i + t q_i(t)
with t = |x| - c_i, where c_i is a float32 near the interval's middle whose f(c_i) = b_i is a float32 within 1e-4
ulp, so that the sum needs no low part: one fma rounds it. t is exact (c_i is within a factor of 2 of every x of its
interval). On interval 0 the base is t = |x| itself, f(t) = t + t q_0(t), so that tiny arguments keep their
relative accuracy. The 16 entries of each table sit in one 16-lane register (two 8-lane ones), and a lane picks its
interval's entry with one permute (`vpermps`/`vpermt2ps`), not a gather. The tables come from
`tools/fit_vector_math.py` (weighted minimax in ulps of the result, coefficients rounded to float32 one by one).
Above the tables erf rounds to 1; tanh is 1 - 2s/(1 + s) with s = exp(-2|x|) (`ember_vexpf`, 1 ulp), whose error
scales with 1 - tanh(x) <= 0.036 there.

8 and 16 lanes use the same tables and steps, so a value has the same bits at either width and in a scalar tail
(`ember_s_erff`, lane 0 of the vector function). Kernels call ember's tanh with 16 lanes only
(`_vector_prelude.OWN`): with 8, permuting from two registers, libmvec's is faster and as accurate.
"""

from __future__ import annotations

from dataclasses import dataclass

# lanes at which kernels call ember's own functions (a permute of 16 entries needs one or two registers)
LANES = (8, 16)


@dataclass(frozen=True)
class Tables:
    """A function's 16 intervals of [0, 16 width): centers c_i, bases b_i = f(c_i), and the coefficients of q_i,
    lowest degree first (row k: the coefficient of t^k in q_i for every i)."""

    width: float
    centers: tuple[float, ...]
    bases: tuple[float, ...]
    coefficients: tuple[tuple[float, ...], ...]

    @property
    def end(self) -> float:
        return 16 * self.width


_ERF_CENTERS = (0.0, 0.3775457441806793, 0.6251201629638672, 0.8754698038101196, 1.1260889768600464,
                1.376109004020691, 1.6262767314910889, 1.8720359802246094, 2.1270627975463867, 2.370445489883423,
                2.6450605392456055, 2.8703136444091797, 3.1196060180664062, 3.3819644451141357, 3.623706579208374,
                3.832519054412842)
_ERF_BASES = (0.0, 0.40661025047302246, 0.6233326196670532, 0.7843214869499207, 0.8887344002723694,
              0.9483587145805359, 0.9785462617874146, 0.9918900728225708, 0.9973713159561157, 0.9991986155509949,
              0.9998164772987366, 0.9999507665634155, 0.9999897480010986, 0.9999982714653015, 0.9999997019767761,
              0.9999999403953552)
_ERF_COEFFICIENTS = (
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

_TANH_CENTERS = (0.0, 0.18765583634376526, 0.3122350573539734, 0.4403780698776245, 0.5617623329162598,
                 0.6854225993156433, 0.8123744130134583, 0.9378150105476379, 1.0679640769958496, 1.1851409673690796,
                 1.3115378618240356, 1.4380607604980469, 1.5608536005020142, 1.687742829322815, 1.8108978271484375,
                 1.9397705793380737)
_TANH_BASES = (0.0, 0.1854836791753769, 0.30246904492378235, 0.41395777463912964, 0.5092838406562805,
               0.5950333476066589, 0.6708980202674866, 0.7342167496681213, 0.7886929512023926, 0.8290657997131348,
               0.8646640181541443, 0.8933066725730896, 0.9155586361885071, 0.93385910987854, 0.9479230046272278,
               0.9595158100128174)
_TANH_COEFFICIENTS = (
    (-1.0047294107806692e-09, 0.9655957818031311, 0.9085124731063843, 0.8286389708518982, 0.7406299710273743,
     0.6459352970123291, 0.5498958230018616, 0.46092575788497925, 0.37796342372894287, 0.3126499056816101,
     0.2523561418056488, 0.20200319588184357, 0.161752387881279, 0.1279071569442749, 0.10144197940826416,
     0.07932940870523453),
    (4.1505029457766796e-07, -0.1791021227836609, -0.2747964560985565, -0.3430212736129761, -0.37719064950942993,
     -0.38435304164886475, -0.3689240515232086, -0.33841946721076965, -0.2980971336364746, -0.2592073678970337,
     -0.21820330619812012, -0.18045082688331604, -0.1480938047170639, -0.11944727599620819, -0.0961591973900795,
     -0.07611783593893051),
    (-0.33335888385772705, -0.28862911462783813, -0.21971921622753143, -0.1342257559299469, -0.05478130280971527,
     0.013409673236310482, 0.06423471868038177, 0.0948365107178688, 0.10912396013736725, 0.11067856848239899,
     0.10454879701137543, 0.09385722130537033, 0.08166705816984177, 0.06891705095767975, 0.05733543634414673,
     0.04659459367394447),
    (0.0005115901585668325, 0.11298894882202148, 0.1576719880104065, 0.169611856341362, 0.15343041718006134,
     0.1201137825846672, 0.07992013543844223, 0.04325206205248833, 0.013378802686929703, -0.005294656381011009,
     -0.01761600747704506, -0.02366192825138569, -0.02539009600877762, -0.024527527391910553, -0.022290673106908798,
     -0.01932997815310955),
    (0.12983347475528717, 0.0941748097538948, 0.04572093114256859, -0.005103137344121933, -0.043025366961956024,
     -0.06532051414251328, -0.06723766773939133, -0.05396118387579918, -0.039545293897390366, -0.02460840344429016,
     -0.013074689544737339, -0.0045170169323682785, 0.00040848011849448085, 0.0016289768973365426,
     0.004683132283389568, 0.004514044150710106),
)

ERF = Tables(0.25, _ERF_CENTERS, _ERF_BASES, _ERF_COEFFICIENTS)
TANH = Tables(0.125, _TANH_CENTERS, _TANH_BASES, _TANH_COEFFICIENTS)


def _table(values: tuple[float, ...], lanes: int) -> str:
    parts = [values[k: k + lanes] for k in range(0, len(values), lanes)]
    return "{" + ", ".join("{" + ", ".join(f"{v!r}f" for v in part) + "}" for part in parts) + "}"


def lookup(lanes: int) -> str:
    """`ember_vlookup16` at `lanes`: entry i[l] (0..15) of a 16-entry table in lane l."""
    vt, it, parts = f"ember_f32x{lanes}", f"ember_i32x{lanes}", 16 // lanes
    shuffle = "__builtin_shuffle(t[0], i)" if parts == 1 else "__builtin_shuffle(t[0], t[1], i)"
    return "\n".join([
        "#if defined(__has_builtin) && !defined(__clang__)",
        "#if __has_builtin(__builtin_shuffle)",
        "#define EMBER_PERMUTE 1",
        "#endif",
        "#endif",
        "// a permute where the compiler has __builtin_shuffle (gcc), else lane by lane",
        f"EMBER_INLINE {vt} ember_vlookup16(const {vt} (&t)[{parts}], {it} i) {{",
        "#ifdef EMBER_PERMUTE",
        f"  return {shuffle};",
        "#else",
        f"  {vt} r; for (int l = 0; l < {lanes}; ++l) r[l] = t[i[l] / {lanes}][i[l] % {lanes}]; return r;",
        "#endif",
        "}",
    ])


def _near(tables: Tables, lanes: int) -> list[str]:
    """C++ computing `near`, f(x) from the tables for x = |a| below their end (any value elsewhere), and `zero`."""
    vt, it, parts = f"ember_f32x{lanes}", f"ember_i32x{lanes}", 16 // lanes
    rows = [("c", tables.centers), ("b", tables.bases)]
    rows += [(f"q{k + 1}", row) for k, row in enumerate(tables.coefficients)]
    top = len(tables.coefficients)
    return [
        *(f"  static const {vt} {name}[{parts}] = {_table(values, lanes)};" for name, values in rows),
        f"  const {vt} x = ember_vabs(a), zero = {{}};",
        f"  const {it} i = __builtin_convertvector(x < {tables.end!r}f ? x * {1 / tables.width!r}f : zero, {it});",
        f"  const {vt} t = x - ember_vlookup16(c, i);",
        f"  {vt} q = ember_vlookup16(q{top}, i);",
        *(f"  q = ember_vfma(q, t, ember_vlookup16(q{k}, i));" for k in range(top - 1, 0, -1)),
        f"  const {vt} near = ember_vfma(q, t, i == 0 ? t : ember_vlookup16(b, i));",
    ]


def vector_erf(lanes: int, name: str = "ember_verf") -> str:
    """`ember_verf` (float32) at `lanes` (8 or 16), in the vector layer's C++ (after `lookup`)."""
    assert lanes in LANES, lanes
    vt = f"ember_f32x{lanes}"
    return "\n".join([f"EMBER_INLINE {vt} {name}({vt} a) {{  // ember's own: `_own_math.py`", *_near(ERF, lanes),
                      f"  return ember_vcopysign(x >= {ERF.end!r}f ? zero + 1.0f : near, a);", "}"])  # NaN: near


def vector_tanh(lanes: int, name: str = "ember_vtanh") -> str:
    """`ember_vtanh` (float32) at `lanes` (8 or 16), in the vector layer's C++ (after `lookup` and `ember_vexpf`)."""
    assert lanes in LANES, lanes
    vt = f"ember_f32x{lanes}"
    return "\n".join([f"EMBER_INLINE {vt} {name}({vt} a) {{  // ember's own: `_own_math.py`",
                      *_near(TANH, lanes),
                      f"  const {vt} s = ember_vexpf(x * -2.0f), far = 1.0f - (s + s) / (1.0f + s);",
                      f"  return ember_vcopysign(x < {TANH.end!r}f ? near : far, a);", "}"])
