// Package layers holds the module's direction of imports as a table and a
// test that checks every package against it, so that an upward arrow (a
// lower layer importing a higher one, or a package reaching past its seam,
// such as journal/ importing dockerio/) fails the build's tests instead of
// growing unnoticed. It has no code: docs/design.md draws the layers (its
// drawing abbreviates; the rank table here is the rule), and a test checks
// that design.md and the README list every package.
package layers
