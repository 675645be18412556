// Package ingest is the first stage of the pipeline: it writes the tasks
// dataset (ML tasks with their measured baselines) and the ideas dataset
// (diversity-filtered improvement ideas) that the rollout stage reads.
//
// Start with [RunTasks] and its [TasksConfig]: it loads and checks every
// task folder (see internal/tasks for the format), runs each initial script
// in a sandbox, grades its submission, uploads the task's files to the data
// root's blob store and commits a tasks dataset version. [ImportMLEBench]
// and [ImportMLAgentBench] convert folders in those benchmarks' layouts into
// task folders first, saying what the layout lacked and how to supply it.
package ingest
