// Package archtest holds no code, only tests of the repository's shape
// that the compiler does not enforce:
//
//   - the import graph (arch_test.go): the stages (ingest, rollout,
//     dataset, train, evaluate, serve, experiment, and their
//     subpackages) import no other stage, even through another package,
//     and the shared packages (internal/..., env/..., policy/...,
//     schemas) import no stage at all: what two stages share belongs in
//     env/, policy/ or internal/. Only cmd/ puts the stages together.
//     Tests may import any package (the pipeline tests run every stage).
//   - function length (funclen_test.go): no function of train/,
//     evaluate/, rollout/ or env/ (tests aside) is over 150 lines; a
//     longer one is split into named steps.
package archtest
