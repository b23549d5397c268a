// Package pool proves warm pools on the real daemon: claims, each sandbox
// clean and timed to its first command, a pool that survives its runtime's
// restart, allowlist rules applied at claim, a pooled sandbox that lost its
// warden (warm_pool_test.go); `stockade serve --pool` (served_test.go).
// STOCKADE_POOL_CLAIMS sets how many claims TestPoolClaims makes (make
// bench-pool).
//
// It needs Docker and the sandbox image (make image).
package pool
