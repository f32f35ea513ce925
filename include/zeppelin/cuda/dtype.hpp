// zeppelin/cuda/dtype.hpp
// Element types of the device kernels and the runtime -> compile-time dispatch over them.
//   dtype                        bf16 | fp16 (16-bit inputs; accumulation is always fp32)
//   supported_head_dims          64, 128
//   dispatch_attention(t, d, f)  calls f(dtype_constant<T>{}, head_dim_constant<D>{}) for the
//                                matching (dtype, head dim) pair, picked with Boost.MP11's
//                                mp_with_index over the cartesian product; returns
//                                cudaErrorInvalidValue (without calling f) when nothing matches.
// nvcc-safe (no device code here): usable from a .cpp that links zeppelin::kernels.
#pragma once

#include <zeppelin/core/config.hpp>

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {

//! 16-bit floating-point input type of an attention kernel.
enum class dtype : std::uint8_t { bf16 = 0, fp16 = 1 };

[[nodiscard]] constexpr std::string_view to_string(dtype t) noexcept {
  return t == dtype::bf16 ? "bf16" : t == dtype::fp16 ? "fp16" : "?";
}
[[nodiscard]] constexpr std::size_t size_of(dtype) noexcept { return 2; }

template <dtype T>
using dtype_constant = std::integral_constant<dtype, T>;
template <int D>
using head_dim_constant = std::integral_constant<int, D>;

//! The dtypes and head dims that kernels are instantiated for (kernels/*.cu).
using supported_dtypes = boost::mp11::mp_list<dtype_constant<dtype::bf16>, dtype_constant<dtype::fp16>>;
using supported_head_dims = boost::mp11::mp_list<head_dim_constant<64>, head_dim_constant<128>>;
//! Every (dtype, head dim) pair, dtype-major: index = dtype_index * |head dims| + head_dim_index.
using supported_attention_configs = boost::mp11::mp_product<boost::mp11::mp_list, supported_dtypes, supported_head_dims>;

//! True when kernels exist for head dimension `d`.
[[nodiscard]] constexpr bool is_supported_head_dim(int d) noexcept {
  bool found = false;
  boost::mp11::mp_for_each<supported_head_dims>([&](auto dim) { found = found || decltype(dim)::value == d; });
  return found;
}

//! Compile-time guard for templates instantiated with an unsupported pair: a readable error.
template <dtype T, int D>
inline constexpr bool is_supported_attention_config =
    boost::mp11::mp_contains<supported_attention_configs,
                             boost::mp11::mp_list<dtype_constant<T>, head_dim_constant<D>>>::value;

//! Runs f(dtype_constant<T>{}, head_dim_constant<D>{}) for the runtime pair (t, head_dim).
//! f must return cudaError_t; an unsupported pair returns cudaErrorInvalidValue.
template <class F>
cudaError_t dispatch_attention(dtype t, int head_dim, F&& f) {
  using namespace boost::mp11;
  constexpr std::size_t num_dims = mp_size<supported_head_dims>::value;
  std::size_t dim_index = num_dims;
  mp_for_each<mp_iota<mp_size<supported_head_dims>>>([&](auto i) {
    if (mp_at_c<supported_head_dims, decltype(i)::value>::value == head_dim) dim_index = decltype(i)::value;
  });
  const auto type_index = static_cast<std::size_t>(t);
  if (dim_index == num_dims || type_index >= mp_size<supported_dtypes>::value) return cudaErrorInvalidValue;
  return mp_with_index<mp_size<supported_attention_configs>::value>(type_index * num_dims + dim_index, [&](auto i) {
    using config = mp_at_c<supported_attention_configs, decltype(i)::value>;
    return f(mp_first<config>{}, mp_second<config>{});
  });
}

}  // namespace device
ZEPPELIN_NAMESPACE_END
