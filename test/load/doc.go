// Package load is the load test, behind the build tag load: 100 sandboxes of
// the python image created, used and removed at once through one server,
// then the same work through the raw Docker client, with both sides'
// percentiles and ratios. `make load` runs it (minutes).
//
// It needs Docker and both images (make image image-python).
package load
