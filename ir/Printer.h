// The IR text printer. Output parses back to a module that prints identically (ir/README.md
// has the grammar); numbers use the shortest spelling that reads back to the same bits.
#pragma once

#include <string>

#include "ir/Module.h"
#include "ir/ValueNames.h"

namespace precast::ir {

std::string print_module(const Module& module);
std::string print_function(const Function& function);

// One op line without indentation or newline, e.g. "%3 = add %1, %2 : f32[4]".
std::string print_op(const Function& function, const ValueNames& names, OpIndex index);

// "f32[8,128]{activation_batch,activation_embed}": a value's type with its axis names.
std::string print_value_type(const Function& function, Value v);

// "P('fsdp', None, ('tensor', 'sequence'))": a value's sharding as JAX prints a PartitionSpec;
// "" when it has none.
std::string print_sharding(const Function& function, Value v);

// True when `text` may be written bare (identifier syntax: [A-Za-z_][A-Za-z0-9_.]*).
bool is_plain_identifier(std::string_view text);

}  // namespace precast::ir
