#pragma once
#include "tuning/observation.hpp"
