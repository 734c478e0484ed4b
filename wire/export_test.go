package wire

// SampleManifest is a valid unsigned manifest, for the tests outside the package (wire_test):
// those sign with meshtest's keys, and meshtest imports wire.
var SampleManifest = testManifest
