// Filled in: the table and JSON report.
#include "doctor/check.h"
