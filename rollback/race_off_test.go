//go:build !race

package rollback

const raceBuild = false
