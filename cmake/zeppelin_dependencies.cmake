# Library dependencies: Debian packages only (scripts/install-deps). Nothing is downloaded.
# Boost >= 1.74 provides Boost.MP11 (header-only); range-v3 0.12 is used only by host-only
# planning headers (see README: "plan in a .cpp, execute in a .cu").
find_package(Boost 1.74 REQUIRED CONFIG COMPONENTS headers)
find_package(range-v3 REQUIRED CONFIG)  # its version file rejects any requested version
