// zeppelin/route.hpp
// All of route/: the router concept, the direct and the three-step proxy routers, and the
// link-model cost of a routed phase. Their vocabulary is core/transfer.hpp. Host code,
// nvcc-safe.
#pragma once

#include <zeppelin/core/transfer.hpp>
#include <zeppelin/route/cost.hpp>
#include <zeppelin/route/direct.hpp>
#include <zeppelin/route/proxy.hpp>
#include <zeppelin/route/router.hpp>
