// Package test holds stockade's integration, end-to-end and crash-drill tests.
// They run against the real Docker daemon named by the environment; under
// CI=true a missing daemon fails them. Each test labels what it creates with
// its own owner id and removes it when it ends.
package test
