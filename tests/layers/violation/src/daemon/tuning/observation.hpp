#pragma once
#include "signals/kernel_signals.hpp"
