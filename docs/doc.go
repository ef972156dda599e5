// Package docs holds ExactOnce's user documentation: one Markdown page per
// job, linked from the README. It has no code; its tests keep the pages
// honest: every heading of the README as it was before the pages has a home,
// every relative link and #anchor resolves, every Go code block is part of a
// compiled Example, and the README's headline figures are the recorded
// benchmark's.
package docs
