// sluice/boost_first.h — include before any Boost header (sluice's own headers that use
// Boost do so first thing). Boost 1.74's Asio calls std::exchange without including
// <utility>, which g++ 12's standard headers no longer pull in by themselves; this is the
// one place that says so.
#pragma once

#include <utility>
