// Binds a command's declared options (common/options.h) to CLI11: one CLI11
// option or flag per declaration, its --help line built from the
// declaration (help text, accepted values, default), its value parsed and
// checked by the declaration, so a bad value exits 2 with the declaration's
// message naming the option, the value and what is accepted.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "common/options.h"

namespace dtrain::cli {

// Adds every option of `options` to `command`, and its table to the ones
// `dtrain settings --markdown` prints. The set must outlive the parse.
void bindOptions(CLI::App& command, OptionSet& options);

// The tables of every command bound so far, in the order they were bound.
std::string boundOptionsMarkdown();

// A command's options struct and the set declared over it, kept together
// (the set holds references into the struct).
template <typename Options>
struct BoundOptions {
  template <typename Declare>
  BoundOptions(std::string command, Declare declare) : set(std::move(command)) {
    declare(set, options);
  }
  Options options;
  OptionSet set;
};

// Makes the struct, declares its options with `declare(set, options)` and
// binds them to `command`.
template <typename Options, typename Declare>
std::shared_ptr<BoundOptions<Options>> bindNew(CLI::App& command, std::string name, Declare declare) {
  auto bound = std::make_shared<BoundOptions<Options>>(std::move(name), declare);
  bindOptions(command, bound->set);
  return bound;
}

}  // namespace dtrain::cli
