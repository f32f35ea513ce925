// zeppelin/core/error.hpp
// The exception hierarchy of every public host API. Each exception carries the source
// location of the throw and the offending numbers as (name, value) pairs, so callers and
// tests can read them back (`e.value("capacity")`) instead of parsing the message.
//   error                 base, derives from std::runtime_error
//   ├─ invalid_argument   bad input: zero/negative lengths, NaN bandwidth, empty batch, ...
//   ├─ infeasible         valid input that cannot be satisfied (batch larger than the cluster)
//   ├─ invalid_plan       a plan that breaks an invariant (core/validate.hpp defines it)
//   ├─ cuda_error         a CUDA runtime call failed (code = cudaError_t)
//   └─ nccl_error         an NCCL call failed or timed out (code = ncclResult_t)
// nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! One number that explains an error, e.g. {"capacity", 4096}.
struct named_value {
  std::string name;
  double value;
};

class error : public std::runtime_error {
 public:
  error(std::string_view message, std::vector<named_value> values, const char* file, int line)
      : std::runtime_error(format(message, values, file, line)),
        values_(std::move(values)),
        file_(file),
        line_(line) {}

  //! Source file and line of the throw.
  [[nodiscard]] const char* file() const noexcept { return file_; }
  [[nodiscard]] int line() const noexcept { return line_; }
  //! The offending numbers, in the order the thrower listed them.
  [[nodiscard]] const std::vector<named_value>& values() const noexcept { return values_; }
  //! The number called `name`, if the thrower attached one.
  [[nodiscard]] std::optional<double> value(std::string_view name) const {
    for (const auto& v : values_)
      if (v.name == name) return v.value;
    return std::nullopt;
  }

 private:
  static std::string format(std::string_view message, const std::vector<named_value>& values,
                            const char* file, int line) {
    std::ostringstream out;
    out.precision(17);
    out << message;
    if (!values.empty()) {
      out << " (";
      for (std::size_t i = 0; i < values.size(); ++i)
        out << (i ? ", " : "") << values[i].name << '=' << values[i].value;
      out << ')';
    }
    out << " [" << file << ':' << line << ']';
    return out.str();
  }

  std::vector<named_value> values_;
  const char* file_;
  int line_;
};

//! Bad input: the caller passed something no plan can be made from.
class invalid_argument : public error {
  using error::error;
};

//! Well-formed input that cannot be satisfied (e.g. more tokens than the cluster holds).
class infeasible : public error {
  using error::error;
};

//! Input the library can take, whose result would exceed a stated resource limit (e.g. an
//! execution program larger than program_options::max_member_rounds allows).
class resource_limit : public error {
  using error::error;
};

//! A failed CUDA runtime call; code() is the cudaError_t value.
class cuda_error : public error {
 public:
  cuda_error(int code, std::string_view message, const char* file, int line)
      : error(message, {{"code", static_cast<double>(code)}}, file, line), code_(code) {}
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

//! A failed or timed-out NCCL operation; code() is the ncclResult_t value.
class nccl_error : public error {
 public:
  nccl_error(int code, std::string_view message, const char* file, int line)
      : error(message, {{"code", static_cast<double>(code)}}, file, line), code_(code) {}
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

ZEPPELIN_NAMESPACE_END

//! Throws `Type` (a zeppelin::error subclass) with the message and named numbers:
//! ZEPPELIN_THROW(invalid_argument, "capacity must be positive", {{"capacity", c}});
#define ZEPPELIN_THROW(Type, message, ...) \
  throw ::zeppelin::Type((message), std::vector<::zeppelin::named_value> __VA_ARGS__, __FILE__, __LINE__)

//! Precondition on caller input: throws zeppelin::invalid_argument when `cond` is false.
//! ZEPPELIN_EXPECTS(n > 0, "node count must be positive", {{"nodes", n}});
#define ZEPPELIN_EXPECTS(cond, message, ...)              \
  do {                                                    \
    if (!(cond)) ZEPPELIN_THROW(invalid_argument, message, __VA_ARGS__); \
  } while (false)
