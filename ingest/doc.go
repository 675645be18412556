// Package ingest is the first stage of the pipeline: it writes the tasks
// dataset (ML tasks with their measured baselines) and the ideas dataset
// (diversity-filtered improvement ideas) that the rollout stage reads.
//
// Start with [RunTasks] and its [TasksConfig]: it loads and checks every
// task folder (see internal/tasks for the format), runs each initial script
// in a sandbox, grades its submission, uploads the task's files to the data
// root's blob store and commits a tasks dataset version. A bad task is
// reported (task, file, field, what to do) and left out; the others are
// committed and the error wraps [ErrSomeFailed].
//
// Importing: [ImportMLEBench] and [ImportMLAgentBench] (`mlerl ingest
// tasks --from mlebench|mlagentbench <dir>`) convert folders in those
// benchmarks' layouts into task folders under import_to, generating what
// they can (a CSV grader for a known metric, a sectioned baseline train.py
// for a tabular CSV task) and printing a MISSING line for each thing the
// layout lacks, with the file and field to add. Add those to the written
// task folder and run the same command again: existing task folders are
// kept as they are, so hand edits survive. A source whose data is not
// prepared yet is reported and not written.
package ingest
