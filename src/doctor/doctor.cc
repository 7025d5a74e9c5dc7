// Filled in by the doctor runner.
#include "doctor/check.h"
