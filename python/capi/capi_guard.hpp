// python/capi/capi_guard.hpp
// The error convention of zeppelin_capi.h: guarded(f) runs f and turns any exception into a
// nonzero return and this thread's last_error message (one definition for every translation
// unit of the library), so no C++ exception crosses the C ABI.
#pragma once

#include <zeppelin/core/error.hpp>

#include <exception>
#include <new>
#include <string>

namespace zeppelin::capi {

inline thread_local std::string last_error;

template <class F>
int guarded(F&& f) noexcept {
  try {
    last_error.clear();
    f();
    return 0;
  } catch (const std::bad_alloc&) {
    last_error = "zeppelin: out of memory";
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "zeppelin: unknown error";
  }
  return 1;
}

}  // namespace zeppelin::capi
