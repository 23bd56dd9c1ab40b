// RUN: %dg opt %s --passes autodiff | %filecheck %s

// func.call: the reverse of a call calls the callee's `__vjp_<mask>` function
// (which recomputes the callee's forward); the mask lists the active operands.
// A recursive callee's is `__vjp_<mask>_sh`: it takes a shadow per operand in the
// mask, the caller's adjoint of it so far (zeros where there is none), and gives
// it back with its share added (and nothing else); a callee that cannot call itself (helper) gives
// fresh gradients, which the caller adds to its adjoints.
// Recursion works because rec__vjp_0_sh is named before it is made: its body
// calls itself. The `vjp` declaration (cotangent in, gradients out) is
// defined by a call to rec__vjp_0 (no shadows: the outermost gradient),
// keeping the gradients only.
// CHECK-NOT: dg.kind
// CHECK-LABEL: func.func @helper__vjp_0_1(%arg0: tensor<f64>, %arg1: tensor<f64>, %arg2: tensor<f64>) -> (tensor<f64>, tensor<f64>, tensor<f64>)
// CHECK: %[[V:.*]] = "dg.add"
// CHECK: %[[DA:.*]] = "dg.mul"(%arg2, %arg1)
// CHECK: %[[DB:.*]] = "dg.add"(%arg2,
// CHECK: return %[[V]], %[[DA]], %[[DB]]

// CHECK-LABEL: func.func @rec__vjp_0_sh(%arg0: tensor<f64>, %arg1: tensor<i64>, %arg2: tensor<f64>, %arg3: tensor<f64>) -> tensor<f64> attributes {dg.donated = array<i64: 3>}
// It gives back only the shadow (its callers have the forward's results), and the shadow is
// donated: callers hand it over. The forward sweep's copies that only made the results it no
// longer gives are gone: the forward keeps the early return's flag, and the recursive and the
// helper calls run once, in the reverse of their branch.
// CHECK: %[[BASE:.*]] = "dg.to_i1"
// CHECK: %[[FWD:.*]]:2 = scf.if %[[BASE]] -> (tensor<i1>, tensor<f64>) {
// CHECK-NOT: func.call
// CHECK: %[[REC:.*]] = "dg.to_i1"
// Reverse of the recursive branch: same condition; the helper's VJP (its gradient
// of x added to this function's shadow of x, %arg3), then the recursive call's
// (rec__vjp_0_sh itself) with helper's adjoint of its first operand.
// CHECK: %[[DREC:.*]]:2 = scf.if %[[REC]] -> (tensor<f64>, tensor<f64>) {
// CHECK: %[[S:.*]] = "dg.sin"(%arg0)
// CHECK: %[[N1:.*]] = "dg.sub"(%arg1,
// CHECK: %[[R:.*]] = func.call @rec(%[[S]], %[[N1]])
// CHECK: %[[H:.*]]:3 = func.call @helper__vjp_0_1(%[[R]], %arg0, %arg2)
// CHECK: %[[SX:.*]] = "dg.add"(%arg3, %[[H]]#2)
// CHECK: %[[RR:.*]] = func.call @rec__vjp_0_sh(%[[S]], %[[N1]], %[[H]]#1,
// CHECK: %[[COS:.*]] = "dg.cos"(%arg0)
// CHECK: %[[DS:.*]] = "dg.mul"(%[[RR]], %[[COS]])
// CHECK: "dg.add"(%[[SX]], %[[DS]])
// CHECK: } else {
// CHECK: scf.yield %arg3, %arg2
// CHECK: }
// Reverse of the base case: same condition as its forward.
// CHECK: %[[DX:.*]] = scf.if %[[BASE]] -> (tensor<f64>) {
// CHECK: "dg.add"(%[[DREC]]#0, %[[DREC]]#1)
// CHECK: } else {
// CHECK: scf.yield %[[DREC]]#0
// CHECK: }
// CHECK: return %[[DX]] : tensor<f64>

// The outermost gradient: the same sweeps, no shadow; its recursive call is of the `_sh` function.
// CHECK-LABEL: func.func @rec__vjp_0(%arg0: tensor<f64>, %arg1: tensor<i64>, %arg2: tensor<f64>) -> (tensor<f64>, tensor<f64>)
// CHECK: func.call @helper__vjp_0_1(
// CHECK: func.call @rec__vjp_0_sh(

// CHECK-LABEL: func.func @rec__pullback(%arg0: tensor<f64>, %arg1: tensor<i64>, %arg2: tensor<f64>) -> tensor<f64>
// CHECK: %[[P:.*]]:2 = call @rec__vjp_0(%arg0, %arg1, %arg2)
// CHECK: return %[[P]]#1 : tensor<f64>
// CHECK-LABEL: func.func @helper(
// CHECK-LABEL: func.func @rec(
// CHECK-NOT: __vjp
// CHECK-LABEL: func.func @g(
// CHECK: call @rec__pullback(%arg0, %arg1, %arg2)
module {
  func.func private @rec__pullback(tensor<f64>, tensor<i64>, tensor<f64>) -> tensor<f64> attributes {dg.kind = "vjp", dg.of = "rec", dg.wrt = array<i64: 0>}
  func.func @helper(%arg0: tensor<f64>, %arg1: tensor<f64>) -> tensor<f64> {
    %0 = "dg.mul"(%arg0, %arg1) : (tensor<f64>, tensor<f64>) -> tensor<f64>
    %1 = "dg.add"(%0, %arg1) : (tensor<f64>, tensor<f64>) -> tensor<f64>
    return %1 : tensor<f64>
  }
  func.func @rec(%arg0: tensor<f64>, %arg1: tensor<i64>) -> tensor<f64> {
    %0 = "dg.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
    %1 = "dg.le"(%arg1, %0) : (tensor<i64>, tensor<i64>) -> tensor<i1>
    %2 = "dg.to_i1"(%1) : (tensor<i1>) -> i1
    %3:2 = scf.if %2 -> (tensor<i1>, tensor<f64>) {
      %7 = "dg.constant"() {value = dense<true> : tensor<i1>} : () -> tensor<i1>
      scf.yield %7, %arg0 : tensor<i1>, tensor<f64>
    } else {
      %7 = "dg.constant"() {value = dense<false> : tensor<i1>} : () -> tensor<i1>
      %8 = "dg.undef"() {dtype = f64, shape = array<i64>} : () -> tensor<f64>
      scf.yield %7, %8 : tensor<i1>, tensor<f64>
    }
    %4 = "dg.not"(%3#0) : (tensor<i1>) -> tensor<i1>
    %5 = "dg.to_i1"(%4) : (tensor<i1>) -> i1
    %6:2 = scf.if %5 -> (tensor<i1>, tensor<f64>) {
      %7 = "dg.sin"(%arg0) : (tensor<f64>) -> tensor<f64>
      %8 = "dg.constant"() {value = dense<1> : tensor<i64>} : () -> tensor<i64>
      %9 = "dg.sub"(%arg1, %8) : (tensor<i64>, tensor<i64>) -> tensor<i64>
      %10 = func.call @rec(%7, %9) : (tensor<f64>, tensor<i64>) -> tensor<f64>
      %11 = func.call @helper(%10, %arg0) : (tensor<f64>, tensor<f64>) -> tensor<f64>
      %12 = "dg.constant"() {value = dense<true> : tensor<i1>} : () -> tensor<i1>
      scf.yield %12, %11 : tensor<i1>, tensor<f64>
    } else {
      scf.yield %3#0, %3#1 : tensor<i1>, tensor<f64>
    }
    return %6#1 : tensor<f64>
  }
  func.func @g(%arg0: tensor<f64>, %arg1: tensor<i64>, %arg2: tensor<f64>) -> (tensor<f64>, tensor<f64>) {
    %0 = call @rec(%arg0, %arg1) : (tensor<f64>, tensor<i64>) -> tensor<f64>
    %1 = call @rec__pullback(%arg0, %arg1, %arg2) : (tensor<f64>, tensor<i64>, tensor<f64>) -> tensor<f64>
    %2 = "dg.zeros_like"(%arg1) : (tensor<i64>) -> tensor<i64>
    return %0, %1 : tensor<f64>, tensor<f64>
  }
}

