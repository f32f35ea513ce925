// zeppelin/route.hpp
// All of route/: ring edges and routed messages, the router concept, the direct and the
// three-step proxy routers, and the link-model cost of a routed round. Host-only.
#pragma once

#include <zeppelin/route/cost.hpp>
#include <zeppelin/route/direct.hpp>
#include <zeppelin/route/message.hpp>
#include <zeppelin/route/proxy.hpp>
#include <zeppelin/route/router.hpp>
