// What a run costs, for `dtrain plan` (torch-free): GPU-hours at cloud
// prices, and owning the cluster -- hardware, power and maintenance over
// its years -- as a price per GPU-hour at a utilisation, with the
// utilisation at which owning costs what renting does.
//
//   power per year  = nodes x kW per node x 8,760 h x price per kWh
//   total (TCO)     = nodes x capex + years x (power per year + nodes x maintenance per year)
//   per GPU-hour    = TCO / (years x 8,760 h x GPUs x utilisation)
//   break-even      = TCO / (years x 8,760 h x GPUs x cloud price per GPU-hour)
// (seed 003's 10 DGX A100 at 8 kW and $0.12/kWh: $84,096 of power a year).
#pragma once

#include <optional>

namespace dtrain::plan {

inline constexpr double kHoursPerYear = 8760;

struct OnPremises {
  double capex_per_node = 0;         // purchase, per node
  double power_kw_per_node = 0;
  double electricity_per_kwh = 0;
  double maintenance_per_node_year = 0;
  double years = 3;
  double utilization = 0.8;
  bool given() const { return capex_per_node > 0; }
};

struct Tco {
  double capex = 0;
  double power_per_year = 0;
  double maintenance_per_year = 0;
  double total = 0;
  double per_gpu_hour = 0;  // at the utilisation given
};

Tco ownershipCost(const OnPremises& site, int nodes, int gpus_per_node);

// The utilisation (0..) at which owning costs `price` per GPU-hour; above
// it owning is cheaper. Over 1: renting is always cheaper.
double breakEvenUtilization(const OnPremises& site, int nodes, int gpus_per_node, double price);

}  // namespace dtrain::plan
