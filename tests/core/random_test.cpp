// tests/core/random_test.cpp
// random_generator (core/random.hpp): bit-exact against the published splitmix64 and
// xoshiro256** reference code, golden sequences that pin every draw (so a change of
// algorithm is caught on every machine), and statistical properties of below(), between(),
// uniform() and shuffle() (bounds, chi-square uniformity, permutations).
#include <catch2/catch.hpp>
#include <zeppelin/core/random.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

using zeppelin::random_generator;

namespace {

// xoshiro256** 1.0 exactly as in Blackman & Vigna's reference C code
// (https://prng.di.unimi.it/xoshiro256starstar.c), written here independently of the
// library so the two can be compared draw by draw.
struct reference_xoshiro256ss {
  std::uint64_t s[4];
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t next() {
    const std::uint64_t result = rotl(s[1] * 5, 7) * 9;
    const std::uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
  }
};

// splitmix64 exactly as in https://prng.di.unimi.it/splitmix64.c.
std::uint64_t reference_splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Upper critical value of the chi-square distribution with `df` degrees of freedom at
// p ~ 1e-6 (Wilson-Hilferty). The draws are seeded, so a pass is reproducible; the tiny p
// keeps an honest generator from failing while a biased one (e.g. x % n for a large n)
// lands far above.
double chi_square_critical(int df) {
  const double z = 4.75;
  const double k = static_cast<double>(df);
  const double a = 2.0 / (9.0 * k);
  return k * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

double chi_square(const std::vector<long long>& counts, double expected_each) {
  double chi = 0;
  for (long long c : counts) {
    const double d = static_cast<double>(c) - expected_each;
    chi += d * d / expected_each;
  }
  return chi;
}

}  // namespace

static_assert(std::uniform_random_bit_generator<random_generator>);
static_assert(random_generator::min() == 0);
static_assert(random_generator::max() == std::numeric_limits<std::uint64_t>::max());

// constexpr all the way: the first draw of seed 0 is computable at compile time.
static_assert(random_generator(0)() == 0x99ec5f36cb75f2b4ull);
static_assert([] {
  std::uint64_t s = 0;
  return zeppelin::splitmix64(s) == 0xe220a8397b1dcdafull;
}());

TEST_CASE("splitmix64 matches the published reference values", "[core][random]") {
  // First outputs of splitmix64 seeded with 0 (reference code by Vigna; the same values
  // are the canonical test vector used by every port of the algorithm).
  std::uint64_t state = 0;
  CHECK(zeppelin::splitmix64(state) == 0xe220a8397b1dcdafull);
  CHECK(zeppelin::splitmix64(state) == 0x6e789e6aa1b965f4ull);
  CHECK(zeppelin::splitmix64(state) == 0x06c45d188009454full);

  // and the independent transcription agrees on many seeds and steps
  random_generator rng(11);
  for (int i = 0; i < 200; ++i) {
    std::uint64_t a = rng(), b = a;
    for (int step = 0; step < 5; ++step) REQUIRE(zeppelin::splitmix64(a) == reference_splitmix64(b));
    REQUIRE(a == b);
  }
}

TEST_CASE("the reference xoshiro256 transcription reproduces the published vector", "[core][random]") {
  // With state {1, 2, 3, 4} the reference code yields 11520, 0, 1509978240,
  // 1215971899390074240 (the test vector of the reference implementation).
  reference_xoshiro256ss ref{{1, 2, 3, 4}};
  CHECK(ref.next() == 11520ull);
  CHECK(ref.next() == 0ull);
  CHECK(ref.next() == 1509978240ull);
  CHECK(ref.next() == 1215971899390074240ull);
}

TEST_CASE("random_generator is xoshiro256 starstar seeded by splitmix64", "[core][random]") {
  for (std::uint64_t seed : {0ull, 1ull, 42ull, 0xdeadbeefull, ~0ull}) {
    for (std::uint64_t stream : {0ull, 1ull, 7ull}) {
      // documented seeding: splitmix64 started at seed ^ (stream * 0xD1B54A32D192ED03)
      std::uint64_t sm = seed ^ (stream * 0xD1B54A32D192ED03ull);
      reference_xoshiro256ss ref{};
      for (auto& w : ref.s) w = reference_splitmix64(sm);
      random_generator rng(seed, stream);
      for (int i = 0; i < 1000; ++i) REQUIRE(rng() == ref.next());
    }
  }
}

TEST_CASE("golden draws for seeds 0 1 and 42", "[core][random]") {
  // Computed once from the implementation; they must never change, on any machine,
  // compiler or standard library (plans are built from these draws on every rank).
  const std::array<std::pair<std::uint64_t, std::array<std::uint64_t, 4>>, 3> golden{{
      {0, {0x99ec5f36cb75f2b4ull, 0xbf6e1f784956452aull, 0x1a5f849d4933e6e0ull, 0x6aa594f1262d2d2cull}},
      {1, {0xb3f2af6d0fc710c5ull, 0x853b559647364ceaull, 0x92f89756082a4514ull, 0x642e1c7bc266a3a7ull}},
      {42, {0x15780b2e0c2ec716ull, 0x6104d9866d113a7eull, 0xae17533239e499a1ull, 0xecb8ad4703b360a1ull}},
  }};
  for (const auto& [seed, values] : golden) {
    random_generator rng(seed);
    for (std::uint64_t v : values) CHECK(rng() == v);
  }
  random_generator streamed(42, 7);
  CHECK(streamed() == 0xab0b230f7fc48e9aull);
  CHECK(streamed() == 0x048b0576862255caull);
}

TEST_CASE("golden values of the derived draws", "[core][random]") {
  // below/between/uniform/shuffle are defined bit for bit here (no std distributions), so
  // their outputs are pinned too.
  {
    random_generator rng(2024);
    const std::array<std::uint64_t, 16> expect{0, 7, 0, 1, 7, 2, 3, 2, 5, 0, 7, 9, 8, 3, 7, 1};
    for (std::uint64_t v : expect) CHECK(rng.below(10) == v);
  }
  {
    random_generator rng(2024);
    const std::array<std::int64_t, 8> expect{-89, 57, -86, -68, 55, -51, -21, -49};
    for (std::int64_t v : expect) CHECK(rng.between(-100, 100) == v);
  }
  {
    random_generator rng(2024);
    const std::array<double, 4> expect{0x1.c90e2b427aeep-5, 0x1.906fe7dd14f42p-1, 0x1.272314b15ee5p-4,
                                       0x1.47191d355f15p-3};
    for (double v : expect) CHECK(rng.uniform() == v);
  }
  {
    random_generator rng(2024);
    std::vector<int> v(10);
    std::iota(v.begin(), v.end(), 0);
    rng.shuffle(v.begin(), v.end());
    CHECK(v == std::vector<int>{2, 3, 8, 5, 6, 4, 1, 9, 7, 0});
  }
}

TEST_CASE("copies replay the same sequence", "[core][random]") {
  random_generator a(99, 3);
  for (int i = 0; i < 17; ++i) (void)a();
  random_generator b = a;
  for (int i = 0; i < 100; ++i) REQUIRE(a() == b());
}

TEST_CASE("seeds and streams give different sequences", "[core][random]") {
  // The first draws of 64 seeds x 16 streams are all distinct: no two (seed, stream)
  // pairs alias each other, including stream 0 vs seed 0.
  std::set<std::uint64_t> firsts;
  std::set<std::vector<std::uint64_t>> prefixes;
  for (std::uint64_t seed = 0; seed < 64; ++seed)
    for (std::uint64_t stream = 0; stream < 16; ++stream) {
      random_generator rng(seed, stream);
      std::vector<std::uint64_t> prefix(4);
      for (auto& x : prefix) x = rng();
      firsts.insert(prefix[0]);
      prefixes.insert(prefix);
    }
  CHECK(firsts.size() == 64u * 16u);
  CHECK(prefixes.size() == 64u * 16u);

  // a stream is not a shifted copy of another: no overlap in the first 1000 draws
  random_generator s0(5, 0), s1(5, 1);
  std::set<std::uint64_t> a, b;
  for (int i = 0; i < 1000; ++i) {
    a.insert(s0());
    b.insert(s1());
  }
  std::vector<std::uint64_t> common;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(common));
  CHECK(common.empty());
}

TEST_CASE("below(n) stays below n", "[core][random]") {
  random_generator rng(1);
  CHECK(rng.below(0) == 0);
  for (int i = 0; i < 100; ++i) REQUIRE(rng.below(1) == 0);
  for (std::uint64_t bound = 2; bound <= 64; ++bound)
    for (int i = 0; i < 500; ++i) REQUIRE(rng.below(bound) < bound);
  const std::uint64_t top = std::numeric_limits<std::uint64_t>::max();
  for (std::uint64_t bound : std::array<std::uint64_t, 6>{top, top - 1, (1ull << 63) + 1, 1ull << 63, 3ull << 62, 1000000007ull}) {
    for (int i = 0; i < 2000; ++i) REQUIRE(rng.below(bound) < bound);
  }
  // random bounds of every magnitude
  for (int i = 0; i < 5000; ++i) {
    const std::uint64_t bound = (rng() >> rng.below(64)) | 1;
    REQUIRE(rng.below(bound) < bound);
  }
}

TEST_CASE("below(n) is uniform (chi-square over small bounds)", "[core][random]") {
  random_generator rng(7);
  for (std::uint64_t bound : {2ull, 3ull, 5ull, 6ull, 7ull, 10ull, 13ull, 16ull, 31ull, 100ull}) {
    const long long per_bucket = 2000;
    std::vector<long long> counts(bound, 0);
    for (long long i = 0; i < per_bucket * static_cast<long long>(bound); ++i) ++counts[rng.below(bound)];
    INFO("bound = " << bound);
    CHECK(chi_square(counts, static_cast<double>(per_bucket)) < chi_square_critical(static_cast<int>(bound) - 1));
    CHECK(*std::min_element(counts.begin(), counts.end()) > 0);
  }
}

TEST_CASE("below(n) has no modulo bias for large n", "[core][random]") {
  // n = 3 * 2^62: x % n would put half the mass in the first third. Lemire's method with
  // rejection is exactly uniform, so the three thirds get a third each.
  const std::uint64_t bound = 3ull << 62;
  const std::uint64_t third = 1ull << 62;
  random_generator rng(8);
  const long long draws = 30000;
  std::vector<long long> counts(3, 0);
  for (long long i = 0; i < draws; ++i) ++counts[rng.below(bound) / third];
  CHECK(chi_square(counts, draws / 3.0) < chi_square_critical(2));

  // Without the rejection step, floor(x * n / 2^64) = floor(3x / 4) hits multiples of 3
  // twice as often as other values (x = 4m and 4m + 1 both give 3m): residues mod 3 would
  // be 1/2, 1/4, 1/4 instead of a third each.
  std::vector<long long> residues(3, 0);
  for (long long i = 0; i < draws; ++i) ++residues[rng.below(bound) % 3];
  CHECK(chi_square(residues, draws / 3.0) < chi_square_critical(2));

  // the sanity check has teeth: the biased x % n fails it
  std::vector<long long> biased(3, 0);
  for (long long i = 0; i < draws; ++i) ++biased[(rng() % bound) / third];
  CHECK(chi_square(biased, draws / 3.0) > chi_square_critical(2));
}

TEST_CASE("between() is inclusive at both ends", "[core][random]") {
  random_generator rng(3);
  std::set<std::int64_t> seen;
  for (int i = 0; i < 4000; ++i) {
    const std::int64_t v = rng.between(-3, 3);
    REQUIRE(v >= -3);
    REQUIRE(v <= 3);
    seen.insert(v);
  }
  CHECK(seen.size() == 7u);  // -3 and 3 included

  for (int i = 0; i < 50; ++i) REQUIRE(rng.between(5, 5) == 5);
  constexpr auto lo = std::numeric_limits<std::int64_t>::min();
  constexpr auto hi = std::numeric_limits<std::int64_t>::max();
  std::set<std::int64_t> ends;
  for (int i = 0; i < 200; ++i) {
    const auto a = rng.between(lo, lo + 1);
    const auto b = rng.between(hi - 1, hi);
    REQUIRE((a == lo || a == lo + 1));
    REQUIRE((b == hi - 1 || b == hi));
    ends.insert(a);
    ends.insert(b);
  }
  CHECK(ends.size() == 4u);
  // the full int64 range: both signs show up
  int negative = 0;
  for (int i = 0; i < 1000; ++i) negative += rng.between(lo, hi) < 0;
  CHECK(negative > 400);
  CHECK(negative < 600);
  // random ranges
  for (int i = 0; i < 5000; ++i) {
    const std::int64_t a = static_cast<std::int64_t>(rng()) >> rng.below(63);
    const std::int64_t b = a + static_cast<std::int64_t>(rng.below(1000));
    const std::int64_t v = rng.between(a, b);
    REQUIRE(v >= a);
    REQUIRE(v <= b);
  }
}

TEST_CASE("uniform() lies in 0 to 1 (1 excluded) on a 2^-53 grid with mean 1/2", "[core][random]") {
  random_generator rng(4);
  const int n = 100000;
  double sum = 0;
  std::vector<long long> deciles(10, 0);
  for (int i = 0; i < n; ++i) {
    const double u = rng.uniform();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    const double scaled = u * 0x1.0p53;
    REQUIRE(scaled == std::floor(scaled));
    sum += u;
    ++deciles[static_cast<std::size_t>(u * 10)];
  }
  CHECK(sum / n == Approx(0.5).margin(0.005));
  CHECK(chi_square(deciles, n / 10.0) < chi_square_critical(9));
}

TEST_CASE("shuffle is a uniform permutation", "[core][random]") {
  random_generator rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const auto n = static_cast<std::size_t>(rng.below(50));
    std::vector<int> v(n);
    std::iota(v.begin(), v.end(), 0);
    rng.shuffle(v.begin(), v.end());
    std::vector<int> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> expect(n);
    std::iota(expect.begin(), expect.end(), 0);
    REQUIRE(sorted == expect);
  }
  // empty and single-element ranges are untouched
  std::vector<int> one{9};
  rng.shuffle(one.begin(), one.begin());
  rng.shuffle(one.begin(), one.end());
  CHECK(one == std::vector<int>{9});

  // all 24 orders of 4 elements appear about equally often
  const long long per_order = 500;
  std::vector<long long> counts(24, 0);
  for (long long t = 0; t < 24 * per_order; ++t) {
    std::array<int, 4> a{0, 1, 2, 3};
    rng.shuffle(a.begin(), a.end());
    // rank of the permutation (Lehmer code)
    int code = 0;
    for (int i = 0; i < 4; ++i) {
      int smaller = 0;
      for (int j = i + 1; j < 4; ++j) smaller += a[static_cast<std::size_t>(j)] < a[static_cast<std::size_t>(i)];
      code = code * (4 - i) + smaller;
    }
    ++counts[static_cast<std::size_t>(code)];
  }
  CHECK(chi_square(counts, static_cast<double>(per_order)) < chi_square_critical(23));
  CHECK(*std::min_element(counts.begin(), counts.end()) > 0);
}
