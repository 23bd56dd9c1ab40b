"""What every layer of dg may import: the IR's types, the MLIR bindings, the errors, the IR
writer and the names compiled code and its executor share."""
