#include "plan/run_cost.h"

namespace dtrain::plan {

Tco ownershipCost(const OnPremises& site, int nodes, int gpus_per_node) {
  Tco t;
  t.capex = nodes * site.capex_per_node;
  t.power_per_year = nodes * site.power_kw_per_node * kHoursPerYear * site.electricity_per_kwh;
  t.maintenance_per_year = nodes * site.maintenance_per_node_year;
  t.total = t.capex + site.years * (t.power_per_year + t.maintenance_per_year);
  const double gpu_hours = site.years * kHoursPerYear * nodes * gpus_per_node * site.utilization;
  t.per_gpu_hour = gpu_hours > 0 ? t.total / gpu_hours : 0;
  return t;
}

double breakEvenUtilization(const OnPremises& site, int nodes, int gpus_per_node, double price) {
  const double total = ownershipCost(site, nodes, gpus_per_node).total;
  const double rented_all_the_time = site.years * kHoursPerYear * nodes * gpus_per_node * price;
  return rented_all_the_time > 0 ? total / rented_all_the_time : 0;
}

}  // namespace dtrain::plan
