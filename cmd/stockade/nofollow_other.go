//go:build !linux

package main

// noFollow: elsewhere, noLinkBetween's check alone guards the parents.
const noFollow = 0
