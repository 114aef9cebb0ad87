// Package gen is the generator of the randomized invariant harness (chaos): from one seed, a Setup (tables,
// shards, queue types, lanes, an initial snapshot, rows the router must refuse, emitted events, the broker
// node) and a Schedule of operations and faults.
//
// Invariants, each pinned by a test in gen_test.go:
//  1. Every choice comes from the seed, so a seed is a reproducible run: the plan is a function of the
//     seed and the options alone (TestGenerateIsAFunctionOfTheSeed).
//  2. Fault kinds known to be broken on main are generated only when named in Options.KnownBroken
//     (knownBroken lists each with its finding; TestKnownBrokenKindsOnlyWhenAsked).
//  3. A feature added later draws from a generator of its own seeded by the seed, so the plans of the
//     seeds in the CI list keep what they had before it.
//
// It knows nothing of how a plan is run or judged.
package gen
