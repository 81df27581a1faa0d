#include "tuning/observation.hpp"

#include <fstream>
